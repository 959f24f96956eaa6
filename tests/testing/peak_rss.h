// Peak-RSS probe for tests that bound memory: reset the kernel's high-water mark of this process's
// RSS, run the work, read the mark. getrusage's ru_maxrss is no use for this: it keeps the peak of
// everything before (writing the inputs, other tests in the same process), and the largest
// allocation of the work itself is gone by the time it returns.
#ifndef PILEPREP_TESTS_TESTING_PEAK_RSS_H_
#define PILEPREP_TESTS_TESTING_PEAK_RSS_H_

#include <string_view>

namespace pileprep::testing {

// Resets VmHWM to the current RSS (Linux 4.0+: "5" to /proc/self/clear_refs); false where it
// cannot, and the caller skips its check.
bool ResetPeakRss();

// A field of /proc/self/status in KiB ("VmHWM", "VmRSS"), or -1 where there is none.
long ProcStatusKiB(std::string_view field);

}  // namespace pileprep::testing

#endif  // PILEPREP_TESTS_TESTING_PEAK_RSS_H_
