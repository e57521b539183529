// A loaded copy of a program that forks its workers: a world of many
// processes starts without each of them loading libtorch (Note [Fork server],
// fork_server.cpp).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace castor::config {

/// First thing in main() of a program whose copies a ForkServer starts. In
/// the server this never returns (it forks until its requester goes away);
/// in each process forked from it, it returns with argc and argv, the
/// environment, the working folder, signals and stdout/stderr of the request
/// (FS3).
/// In any other process it returns at once and changes nothing.
void serve_forks_if_asked(int& argc, char**& argv);

class ForkServer {
 public:
  /// Starts `executable` as a fork server; it must call serve_forks_if_asked.
  /// Makes this process a child subreaper (FS2). A request not answered
  /// within `reply_bound` (the first one waits for the server's own load)
  /// gives up on the server (FS5).
  explicit ForkServer(const std::string& executable,
                      std::chrono::milliseconds reply_bound = std::chrono::seconds(30));
  ~ForkServer();  // ends the server (FS6)
  ForkServer(const ForkServer&) = delete;
  ForkServer& operator=(const ForkServer&) = delete;

  /// A new process of the executable, as fork+exec of `argv` (argv[0]
  /// included) with this process's environment plus `env` and stdout and
  /// stderr on `out_fd` (-1: this process's) would give; a child of this
  /// process, with `death_signal` as its PR_SET_PDEATHSIG (0: none; FS8:
  /// sent when this process's main thread ends).
  /// -1 when the server cannot (why: last_error()); the caller starts the
  /// process the usual way then (FS4, FS5).
  pid_t spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
              int out_fd = -1, int death_signal = 0);

  /// False once the server is gone for good (FS5).
  bool running() const;
  /// -1 once it is gone.
  pid_t server_pid() const { return server_pid_.load(); }
  const std::string& executable() const { return executable_; }
  std::string last_error() const;

  /// When `pid`, a child of ours that ended, is this server: reaps it (the
  /// server is gone for good) and says so. For a launcher that reaps what
  /// comes to it as a subreaper: the server's pid is reaped only here, so
  /// it is never another process's when this kills it.
  bool reap_if_dead(pid_t pid);

 private:
  void fail(std::string why);  // under mtx_: the server is gone for good

  std::string executable_;
  std::chrono::milliseconds reply_bound_;
  pid_t owner_;                              // FS6: the process that started the server
  std::vector<std::string> load_time_env_;   // FS4: "NAME=value", sorted by name
  mutable std::mutex mtx_;
  int fd_ = -1;
  std::atomic<pid_t> server_pid_{-1};
  std::string error_;
};

/// This process's server for `executable`, started on first use; nullptr
/// when CASTOR_FORK_SERVER=0 or the server is gone (FS5).
ForkServer* fork_server_for(const std::string& executable);

/// When `pid` (a child of ours that ended) is the server of a
/// fork_server_for() of this process: reaps it there and says so.
bool reap_if_fork_server(pid_t pid);

/// A new process of `executable` with `argv` (argv[0] included), through
/// fork_server_for(executable) when it can, else posix_spawn: either way a
/// child of this process with this process's environment plus `env`, and
/// stdout and stderr on `out_fd` (-1: this process's). -1 when neither
/// could start it. The executable must call serve_forks_if_asked.
pid_t spawn_process(const std::string& executable, const std::vector<std::string>& argv,
                    const std::map<std::string, std::string>& env = {}, int out_fd = -1);

}  // namespace castor::config
