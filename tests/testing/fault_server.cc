#include "testing/fault_server.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pileprep::testing {

absl::StatusOr<std::unique_ptr<FaultServer>> FaultServer::Start(
    const std::string& root, const std::vector<std::string>& args) {
  std::unique_ptr<FaultServer> server(new FaultServer());
  char tmpl[] = "/tmp/pileprep-fault-server-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  server->dir_ = tmpl;
  const std::string port_file = server->dir_ + "/port";
  // The script sits beside this file (CMake compiles it by absolute path).
  const std::string script =
      (std::filesystem::path(__FILE__).parent_path() / "fault_server.py").string();
  std::vector<std::string> argv_s = {"/usr/bin/python3", script,
                                     "--root", root, "--port-file", port_file,
                                     "--log", server->dir_ + "/log"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  server->pid_ = pid;
  for (int i = 0; i < 200; ++i) {
    std::ifstream in(port_file);
    if (in >> server->port_) return server;
    int st;
    if (::waitpid(pid, &st, WNOHANG) == pid) {
      server->pid_ = -1;
      return absl::InternalError("fault_server.py exited at start");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError("fault_server.py did not start in 10 s");
}

FaultServer::~FaultServer() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    int st;
    ::waitpid(pid_, &st, 0);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string FaultServer::Url(const std::string& file) const {
  return absl::StrCat("http://127.0.0.1:", port_, "/", file);
}

std::vector<std::string> FaultServer::Log() const {
  std::vector<std::string> lines;
  std::ifstream in(dir_ + "/log");
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace pileprep::testing
