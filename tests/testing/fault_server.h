// Starts tests/testing/fault_server.py (a loopback HTTP server with fault injection) for one test and
// stops it when destroyed. See the script's docstring for the fault plans.
//
//   auto server = FaultServer::Start(dir, {"--plan", "00.jsonl.zst=503,drop:1000"});
//   OpenHttpSource(server->Url("00.jsonl.zst"), options);
//   server->Log(2);  // one JSON object per request, in order; waits for at least 2 lines
//
// The server is a child process that dies with the thread that started it (PR_SET_PDEATHSIG), even
// when the test process is killed, and never holds the test's stdout/stderr (a test runner waiting for
// those pipes to close would otherwise wait for an orphaned server). Its output goes to a file that
// Start() quotes when the server fails to come up.
#ifndef PILEPREP_TESTS_TESTING_FAULT_SERVER_H_
#define PILEPREP_TESTS_TESTING_FAULT_SERVER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pileprep::testing {

class FaultServer {
 public:
  static absl::StatusOr<std::unique_ptr<FaultServer>> Start(const std::string& root,
                                                            const std::vector<std::string>& args);
  ~FaultServer();
  int port() const { return port_; }
  std::string Url(const std::string& file) const;
  // The raw JSON lines of the request log. The server logs a request when its answer ends, which a
  // client may notice first (it hung up, or read the last byte): waits up to 10 s for at least
  // `at_least` complete lines, then returns what is there.
  std::vector<std::string> Log(size_t at_least = 0) const;

 private:
  FaultServer() = default;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string dir_;  // port file and log
};

}  // namespace pileprep::testing

#endif  // PILEPREP_TESTS_TESTING_FAULT_SERVER_H_
