#include "testing/fault_server.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pileprep::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

absl::StatusOr<std::unique_ptr<FaultServer>> FaultServer::Start(
    const std::string& root, const std::vector<std::string>& args) {
  std::unique_ptr<FaultServer> server(new FaultServer());
  // $TMPDIR's (temp_directory_path), as the tests' other files: /tmp may not be writable.
  std::string tmpl =
      (std::filesystem::temp_directory_path() / "pileprep-fault-server-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  server->dir_ = tmpl;
  const std::string port_file = server->dir_ + "/port";
  const std::string out_file = server->dir_ + "/output";
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
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    // The child of a multithreaded process: only async-signal-safe calls until execv.
    // Die with the parent, even when it is SIGKILLed (the signal survives execv). If the parent died
    // before prctl took effect, we were reparented already and nobody would ever kill us.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(126);
    // Never hold the test's stdout/stderr (a runner waits for those pipes to close) or any other
    // descriptor of the parent (sockets, pipes).
    const int in = ::open("/dev/null", O_RDONLY);
    const int out = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || ::dup2(in, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(out, 2) < 0) {
      ::_exit(126);
    }
    ::close_range(3, ~0U, 0);
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
      return absl::InternalError(
          absl::StrCat("fault_server.py exited at start: ", ReadAll(out_file)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("fault_server.py did not start in 10 s: ", ReadAll(out_file)));
}

FaultServer::~FaultServer() {
  if (pid_ > 0) {
    // Nothing in the server needs an orderly stop; SIGKILL cannot be delayed or ignored.
    ::kill(pid_, SIGKILL);
    int st;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string FaultServer::Url(const std::string& file) const {
  return absl::StrCat("http://127.0.0.1:", port_, "/", file);
}

std::vector<std::string> FaultServer::Log(size_t at_least) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (true) {
    // Only complete lines: the server may be in the middle of appending one.
    const std::string text = ReadAll(dir_ + "/log");
    std::vector<std::string> lines;
    size_t start = 0;
    for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
      lines.push_back(text.substr(start, nl - start));
    }
    if (lines.size() >= at_least || std::chrono::steady_clock::now() >= deadline) return lines;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace pileprep::testing
