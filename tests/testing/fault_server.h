// Starts tests/testing/fault_server.py (a loopback HTTP server with fault injection) for one test and
// stops it when destroyed. See the script's docstring for the fault plans.
//
//   auto server = FaultServer::Start(dir, {"--plan", "00.jsonl.zst=503,drop:1000"});
//   OpenHttpSource(server->Url("00.jsonl.zst"), options);
//   server->Log();   // one JSON object per request, in order
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
  std::vector<std::string> Log() const;  // raw JSON lines

 private:
  FaultServer() = default;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string dir_;  // port file and log
};

}  // namespace pileprep::testing

#endif  // PILEPREP_TESTS_TESTING_FAULT_SERVER_H_
