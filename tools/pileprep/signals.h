// SIGINT/SIGTERM/SIGHUP for the commands that write datasets (the shard job, preprocess and merge;
// SIGHUP only when not ignored, as under nohup). SIGPIPE is ignored there: a write to a stderr pipe
// whose reader went away fails instead of ending the run before its summary.
//
// The first signal sets a flag the pipeline polls (PipelineOptions::cancel; a merge polls it as
// MergeOptions::cancel, per input and per block): the current input
// stops at its next batch, its temporaries are removed, nothing is published, no further input is
// started, the summary is still printed and written, and the process exits 128 + the signal number
// (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP). A second signal ends the process at once with
// the default action; the temporaries it leaves are removed by the next run (as after SIGKILL). The
// same signal again within 0.1 s is not a second one: timeout(1) sends each twice (to the process,
// then to its group).
#ifndef PILEPREP_TOOLS_PILEPREP_SIGNALS_H_
#define PILEPREP_TOOLS_PILEPREP_SIGNALS_H_

#include <atomic>

namespace pileprep::cli {

// SIGBUS: inputs and datasets are read through mmap, and a mapped file that another process
// truncates raises SIGBUS where its lost bytes are read (the pipeline's Fetch catches a file that
// shrank between batches; this is for the rest). The handler says so on stderr, then the process
// ends by the signal (exit status 135 in a shell). Call first thing in main.
void InstallBusErrorHandler();

// For the commands that only read datasets (validate, inspect): the SIGBUS message then says the
// command gave no verdict, rather than what a writing command leaves behind.
void SetBusErrorReadOnly();

// Installs the handlers (idempotent). Call before starting work.
void InstallCancelHandlers();

// The flag the handlers set; pass its address as PipelineOptions::cancel.
const std::atomic<bool>& CancelFlag();

// True once a signal arrived.
bool Cancelled();

// 128 + the first signal's number (130, 143), or 0 when none arrived.
int CancelExitCode();
// "SIGINT", "SIGTERM" or "SIGHUP" for such an exit code ("a signal" for any other).
const char* SignalNameOf(int exit_code);

}  // namespace pileprep::cli

#endif  // PILEPREP_TOOLS_PILEPREP_SIGNALS_H_
