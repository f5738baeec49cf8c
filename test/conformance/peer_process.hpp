// Tests that need a second process (IPC): the peer is this very test binary,
// started again to run one hidden test case (tag "[.peer]"), with one end of
// a Unix socket passed as the descriptor in SOVA_TEST_PEER_FD. The peer
// reports through its exit status (Catch2's: 0 when all its checks passed).
#pragma once

#include "support/catch.hpp"

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace sova::test {

/// In a peer: the socket to the test that started it; -1 when this process
/// is not a peer (the hidden test was run by hand).
inline int peer_socket() {
  const char* v = std::getenv("SOVA_TEST_PEER_FD");
  return v != nullptr ? std::atoi(v) : -1;
}

class PeerProcess {
 public:
  /// Starts the peer running test case `test_name`; socket() is this side.
  explicit PeerProcess(const std::string& test_name) {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) == 0);
    socket_ = fds[0];
    constexpr int kPeerFd = 100;  // dup2 clears close-on-exec on it
    const std::string env = "SOVA_TEST_PEER_FD=" + std::to_string(kPeerFd);
    // Everything exec needs is built before fork: only async-signal-safe
    // calls in the child of a threaded process.
    std::vector<std::string> env_strings{env};
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::string(*e).rfind("SOVA_TEST_PEER_FD=", 0) != 0) env_strings.emplace_back(*e);
    }
    std::vector<char*> envp;
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string exe = "/proc/self/exe", name = test_name;
    char* argv[] = {exe.data(), name.data(), nullptr};
    std::fflush(nullptr);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      if (::dup2(fds[1], kPeerFd) < 0) ::_exit(120);
      ::execve(argv[0], argv, envp.data());
      ::_exit(121);
    }
    ::close(fds[1]);
  }
  ~PeerProcess() {
    if (pid_ > 0) wait();
    ::close(socket_);
  }
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  int socket() const { return socket_; }
  /// Whether the peer was started and has not been waited for.
  bool running() const { return pid_ > 0; }
  /// Ends a peer that will not end by itself (one waiting for commands, or
  /// hung): SIGKILL, then waited for.
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  /// The peer's exit status (-1 if it died of a signal: the signal is shown).
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    if (WIFSIGNALED(status)) {
      UNSCOPED_INFO("the peer died of signal " << WTERMSIG(status));
      return -1;
    }
    return WEXITSTATUS(status);
  }

 private:
  int socket_ = -1;
  pid_t pid_ = -1;
};

}  // namespace sova::test
