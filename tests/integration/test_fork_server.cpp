// Note [Fork server]: processes forked from a loaded copy of their program
// are what exec would have made them (FS1-FS4); a server that is gone or
// stops answering, a request too large, or a requester that ends loses
// nothing (FS5, FS6).
// castor_test_worker is the program: its `probe` says what it got.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "config/fork_server.hpp"
#include "config/parent_death.hpp"
#include "support/errors.hpp"
#include "support/process_state.hpp"

using castor::config::ForkServer;
using castor::test::contains;
using namespace std::chrono_literals;

namespace {

const std::string kWorker = CASTOR_TEST_WORKER_PATH;

struct Pipe {
  int read = -1, write = -1;
  Pipe() {
    int p[2];
    REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
    read = p[0];
    write = p[1];
  }
  ~Pipe() {
    close_write();
    if (read >= 0) ::close(read);
  }
  void close_write() {
    if (write >= 0) ::close(write);
    write = -1;
  }
  // Everything written until the last writer closes, or what came within `bound`.
  std::string drain(std::chrono::milliseconds bound = 60s) {
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + bound;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) FAIL("the process's output did not end within ", bound.count(), " ms: ", out);
      pollfd p{read, POLLIN, 0};
      if (::poll(&p, 1, int(left.count())) <= 0) continue;
      char buf[4096];
      auto n = ::read(read, buf, sizeof buf);
      if (n <= 0) return out;
      out.append(buf, size_t(n));
    }
  }
  // What was written until a whole line starting with `prefix` came (the
  // writer may go on); fails the test if it does not come within `bound`.
  std::string read_until_line(const std::string& prefix, std::chrono::milliseconds bound = 60s) {
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + bound;
    for (;;) {
      auto at = ("\n" + out).find("\n" + prefix);
      if (at != std::string::npos && out.find('\n', at) != std::string::npos) return out;
      REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline, "no line '", prefix, "' came: ", out);
      pollfd p{read, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      auto n = ::read(read, buf, sizeof buf);
      REQUIRE_MESSAGE(n > 0, "the process ended before a line '", prefix, "': ", out);
      out.append(buf, size_t(n));
    }
  }
  // The first line that starts with `prefix`, without it.
  static std::string line(const std::string& text, const std::string& prefix) {
    auto at = ("\n" + text).find("\n" + prefix);  // at a line's start: another process may share the pipe
    if (at == std::string::npos) return "(no line '" + prefix + "')";
    auto end = text.find('\n', at);
    return text.substr(at + prefix.size(), end == std::string::npos ? std::string::npos : end - at - prefix.size());
  }
};

// The child's wait status, or nothing if it did not end within `bound`.
std::optional<int> wait_exit(pid_t pid, std::chrono::milliseconds bound = 60s) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  do {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(10ms);
  } while (std::chrono::steady_clock::now() < deadline);
  return std::nullopt;
}

bool ended(pid_t pid) { return castor::test::process_ended(pid); }

// Waits (at most 60 s) until `pid` is blocked in recvmsg; where the kernel
// does not show that, waits 5 s.
void wait_until_in_recvmsg(pid_t pid) {
  if (!castor::test::syscalls_visible()) {
    std::this_thread::sleep_for(5s);
    return;
  }
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!castor::test::blocked_in(pid, SYS_recvmsg) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
}

}  // namespace

TEST_CASE("a forked worker is the requester's child with the request's argv, environment, folder and output") {
  ForkServer server(kWorker);
  REQUIRE(server.running());
  // FS3: the environment and folder of the request's time, not the server's start.
  ::setenv("CASTOR_PROBE_VAR", "set after the server started", 1);
  auto before = std::filesystem::current_path();
  auto folder = std::filesystem::canonical(std::filesystem::temp_directory_path());
  std::filesystem::current_path(folder);
  // And the signals and umask of the request's time.
  auto old_pipe = ::signal(SIGPIPE, SIG_IGN);
  sigset_t usr2, old_mask;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  ::pthread_sigmask(SIG_BLOCK, &usr2, &old_mask);
  auto old_umask = ::umask(027);
  Pipe out;
  pid_t pid = server.spawn({kWorker, "probe", "7"}, {{"CASTOR_PROBE_EXTRA", "1"}}, out.write);
  ::umask(old_umask);
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  ::signal(SIGPIPE, old_pipe);
  std::filesystem::current_path(before);
  ::unsetenv("CASTOR_PROBE_VAR");
  REQUIRE_MESSAGE(pid > 0, server.last_error());
  out.close_write();
  auto text = out.drain();
  auto status = wait_exit(pid);  // FS2: our child, reaped by us
  REQUIRE_MESSAGE(status.has_value(), "the probe did not exit: ", text);
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 7);
  CHECK(Pipe::line(text, "argv: ") == kWorker + "|probe|7");
  CHECK(Pipe::line(text, "var: ") == "set after the server started");
  CHECK(Pipe::line(text, "cwd: ") == folder.string());
  CHECK(Pipe::line(text, "threads: ") == "1");  // as any fork's; the server's own count is FS1's test below
  CHECK(Pipe::line(text, "mm: ") == "524288");  // 64x64 ones times twos: 128 each, 4096 of them
  CHECK(Pipe::line(text, "ppid: ") == std::to_string(::getpid()));
  CHECK(Pipe::line(text, "cmdline: ") == kWorker + "|probe|7");  // ps and pgrep -f see the worker
  CHECK(Pipe::line(text, "environ: ") == "set after the server started");  // and so does ps e
  CHECK(Pipe::line(text, "fds: ") == "0,1,2");  // nothing of the server's, the request's or ours leaks in
  CHECK(Pipe::line(text, "sigpipe: ") == "ignored");
  CHECK(Pipe::line(text, "usr2 blocked: ") == "yes");
  CHECK(Pipe::line(text, "umask: ") == "0027");
  // FS1: the server forks single-threaded (OpenBLAS's pool went at the
  // first fork and never comes back there).
  int server_threads = 0;
  for ([[maybe_unused]] auto& task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(server.server_pid()) + "/task"))
    ++server_threads;
  CHECK(server_threads == 1);
}

TEST_CASE("a forked worker killed with SIGKILL is seen killed by its requester, and the server goes on forking") {
  ForkServer server(kWorker);
  Pipe out;
  pid_t sleeper = server.spawn({kWorker, "probe", "sleep"}, {}, out.write);
  REQUIRE_MESSAGE(sleeper > 0, server.last_error());
  out.close_write();
  // Killed once it runs (its first line is out), not while the server forks it.
  out.read_until_line("cmdline: ");
  REQUIRE(::kill(sleeper, SIGKILL) == 0);
  auto status = wait_exit(sleeper);
  REQUIRE(status.has_value());
  CHECK(WIFSIGNALED(*status));
  CHECK(WTERMSIG(*status) == SIGKILL);
  pid_t next = server.spawn({kWorker, "probe", "0"});
  REQUIRE_MESSAGE(next > 0, server.last_error());
  auto next_status = wait_exit(next);
  REQUIRE(next_status.has_value());
  CHECK(WIFEXITED(*next_status));
  CHECK(WEXITSTATUS(*next_status) == 0);
}

TEST_CASE("a server that died fails its next request with the cause, and spawn_process starts the worker by exec") {
  {
    ForkServer server(kWorker);
    REQUIRE(server.running());
    pid_t server_pid = server.server_pid();
    REQUIRE(::kill(server_pid, SIGKILL) == 0);
    CHECK(server.spawn({kWorker, "probe", "0"}) == -1);  // FS5
    CHECK_FALSE(server.running());
    auto why = server.last_error();
    CHECK_MESSAGE((contains(why, "went away") || contains(why, "took no request")), why);
    CHECK(ended(server_pid));
  }
  // The shared path with the server turned off: exec, same argv, same child.
  ::setenv("CASTOR_FORK_SERVER", "0", 1);
  CHECK(castor::config::fork_server_for(kWorker) == nullptr);
  Pipe out;
  pid_t pid = castor::config::spawn_process(kWorker, {kWorker, "probe", "5"}, {{"CASTOR_PROBE_VAR", "by exec"}},
                                            out.write);
  ::unsetenv("CASTOR_FORK_SERVER");
  REQUIRE(pid > 0);
  out.close_write();
  auto text = out.drain();
  auto status = wait_exit(pid);
  REQUIRE(status.has_value());
  CHECK(WEXITSTATUS(*status) == 5);
  CHECK(Pipe::line(text, "var: ") == "by exec");
  CHECK(Pipe::line(text, "cmdline: ") == kWorker + "|probe|5");
  CHECK(Pipe::line(text, "environ: ") == "by exec");
}

TEST_CASE("a request too large for the server is refused alone: the server goes on, spawn_process execs it") {
  ForkServer server(kWorker);
  // 1.6 MiB of variables (exec takes up to 128 KiB a string, 2 MiB in all).
  std::map<std::string, std::string> huge{{"CASTOR_PROBE_VAR", std::string(100 << 10, 'x')}};
  for (int i = 0; i < 15; ++i) huge["CASTOR_PROBE_FILLER" + std::to_string(i)] = std::string(100 << 10, 'y');
  CHECK(server.spawn({kWorker, "probe", "0"}, huge) == -1);
  CHECK(contains(server.last_error(), "larger than the fork server takes"));
  CHECK(server.running());
  // Under that bound but over what one message on the socket may carry.
  std::map<std::string, std::string> large{{"CASTOR_PROBE_VAR", std::string(100 << 10, 'z')}};
  for (int i = 0; i < 4; ++i) large["CASTOR_PROBE_FILLER" + std::to_string(i)] = std::string(100 << 10, 'y');
  CHECK(server.spawn({kWorker, "probe", "0"}, large) == -1);
  CHECK(contains(server.last_error(), "larger than the fork server's socket takes"));
  CHECK(server.running());
  pid_t next = server.spawn({kWorker, "probe", "4"});
  REQUIRE_MESSAGE(next > 0, server.last_error());
  auto status = wait_exit(next);
  REQUIRE(status.has_value());
  CHECK(WEXITSTATUS(*status) == 4);
  // Through the shared path, the same request is exec'd and loses nothing.
  Pipe out;
  pid_t pid = castor::config::spawn_process(kWorker, {kWorker, "probe", "0"}, huge, out.write);
  REQUIRE(pid > 0);
  out.close_write();
  auto text = out.drain();
  REQUIRE(wait_exit(pid).has_value());
  CHECK(Pipe::line(text, "var: ") == huge["CASTOR_PROBE_VAR"]);
}

TEST_CASE("a request whose load-time variables differ from the server's start is exec'd, with them") {
  ForkServer server(kWorker);
  // FS4: OpenMP and OpenBLAS size themselves while they load, in the server.
  std::map<std::string, std::string> env{{"OMP_NUM_THREADS", "1"}, {"CASTOR_PROBE_VAR", "exec'd"}};
  if (const char* had = std::getenv("OMP_NUM_THREADS"); had && std::string(had) == "1") env["OMP_NUM_THREADS"] = "2";
  CHECK(server.spawn({kWorker, "probe", "0"}, env) == -1);
  CHECK(contains(server.last_error(), "a variable read while libraries load differs"));
  CHECK(server.running());
  Pipe out;
  pid_t pid = castor::config::spawn_process(kWorker, {kWorker, "probe", "6"}, env, out.write);
  REQUIRE(pid > 0);
  out.close_write();
  auto text = out.drain();
  auto status = wait_exit(pid);
  REQUIRE(status.has_value());
  CHECK(WEXITSTATUS(*status) == 6);
  CHECK(Pipe::line(text, "var: ") == "exec'd");
}

TEST_CASE("a forked worker ends with its status and its buffered output but without the load-time teardown (FS7)") {
  ForkServer server(kWorker);
  REQUIRE(server.running());
  const std::map<std::string, std::string> env{{"CASTOR_PROBE_TEARDOWN", "1"}};
  Pipe forked;
  pid_t pid = server.spawn({kWorker, "probe", "teardown", "9"}, env, forked.write);
  REQUIRE_MESSAGE(pid > 0, server.last_error());
  forked.close_write();
  auto text = forked.drain();
  auto status = wait_exit(pid);
  REQUIRE_MESSAGE(status.has_value(), "the probe did not exit: ", text);
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 9);
  CHECK(Pipe::line(text, "unflushed: ") == "the last words" + std::string("main's exit handler: ran"));
  CHECK_MESSAGE(!contains(text, "load-time teardown"), text);

  // The same program exec'd (FS4: a load-time variable differs) ends as usual.
  auto exec_env = env;
  exec_env["OMP_NUM_THREADS"] = "1";
  if (const char* had = std::getenv("OMP_NUM_THREADS"); had && std::string(had) == "1") exec_env["OMP_NUM_THREADS"] = "2";
  Pipe execd;
  pid = castor::config::spawn_process(kWorker, {kWorker, "probe", "teardown", "8"}, exec_env, execd.write);
  REQUIRE(pid > 0);
  execd.close_write();
  text = execd.drain();
  status = wait_exit(pid);
  REQUIRE(status.has_value());
  CHECK(WEXITSTATUS(*status) == 8);
  CHECK(Pipe::line(text, "unflushed: ") == "the last words" + std::string("main's exit handler: ran"));
  CHECK(Pipe::line(text, "load-time teardown: ") == "ran");
}

TEST_CASE("a server that stops answering is given up within the reply bound, with the cause") {
  ForkServer server(kWorker, std::chrono::milliseconds(1500));
  // The first request's bound also covers the server's own load, which on a
  // loaded machine (ctest -j2 beside a training test) may take longer than
  // 1.5 s: wait until it reads its socket, as /proc shows a blocked call.
  wait_until_in_recvmsg(server.server_pid());
  pid_t first = server.spawn({kWorker, "probe", "0"});  // idle again after this one
  REQUIRE_MESSAGE(first > 0, server.last_error());
  REQUIRE(wait_exit(first).has_value());
  pid_t server_pid = server.server_pid();
  REQUIRE(::kill(server_pid, SIGSTOP) == 0);
  auto start = std::chrono::steady_clock::now();
  CHECK(server.spawn({kWorker, "probe", "0"}) == -1);
  auto took = std::chrono::steady_clock::now() - start;
  CHECK(took >= std::chrono::milliseconds(1400));
  CHECK(took < std::chrono::seconds(20));
  CHECK(contains(server.last_error(), "did not answer within 1500 ms"));
  CHECK_FALSE(server.running());
  CHECK(ended(server_pid));  // killed (stopped or not) and reaped
  CHECK(::waitpid(server_pid, nullptr, WNOHANG) == -1);
}

TEST_CASE("a requester that throws ends its server on the way out") {
  pid_t server_pid = -1;
  try {
    ForkServer server(kWorker);
    server_pid = server.server_pid();
    REQUIRE(server_pid > 0);
    throw std::runtime_error("user code threw");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "user code threw");
  }
  CHECK(ended(server_pid));
  CHECK(::waitpid(server_pid, nullptr, WNOHANG) == -1);  // already reaped: no zombie left
}

TEST_CASE("a requester killed with SIGKILL takes its server with it, and its worker lives on") {
  ForkServer subreaper_here(kWorker);  // FS2: orphans of our descendants come to us
  Pipe out;
  pid_t requester = castor::config::spawn_process(kWorker, {kWorker, "requester"}, {}, out.write);
  REQUIRE(requester > 0);
  out.close_write();
  auto text = out.read_until_line("worker ");
  auto server_pid = pid_t(std::atoi(Pipe::line(text, "server ").c_str()));
  auto worker_pid = pid_t(std::atoi(Pipe::line(text, "worker ").c_str()));
  REQUIRE(server_pid > 0);
  REQUIRE(worker_pid > 0);
  REQUIRE(::kill(requester, SIGKILL) == 0);
  auto status = wait_exit(requester);
  REQUIRE(status.has_value());
  CHECK(WTERMSIG(*status) == SIGKILL);
  // FS6: the server reads the end of its socket and exits; it comes to us.
  CHECK_MESSAGE(castor::test::ends_within(server_pid, 30s), "the fork server of a killed requester still runs");
  ::waitpid(server_pid, nullptr, WNOHANG);
  // The worker outlives both; it came to us too, and we end it.
  CHECK_FALSE(ended(worker_pid));
  REQUIRE(::kill(worker_pid, SIGKILL) == 0);
  auto worker_status = wait_exit(worker_pid);
  REQUIRE(worker_status.has_value());
  CHECK(WTERMSIG(*worker_status) == SIGKILL);
}

TEST_CASE("a worker whose request named a death signal gets it when its requester is SIGKILLed (FS8)") {
  ForkServer subreaper_here(kWorker);  // FS2: the orphan comes to us
  Pipe out;
  pid_t requester =
      castor::config::spawn_process(kWorker, {kWorker, "requester", std::to_string(SIGTERM)}, {}, out.write);
  REQUIRE(requester > 0);
  out.close_write();
  auto text = out.read_until_line("worker ");
  auto worker_pid = pid_t(std::atoi(Pipe::line(text, "worker ").c_str()));
  REQUIRE(worker_pid > 0);
  CHECK_FALSE(ended(worker_pid));  // it sleeps while its requester lives
  REQUIRE(::kill(requester, SIGKILL) == 0);
  REQUIRE(wait_exit(requester).has_value());
  auto worker_status = wait_exit(worker_pid, 10s);
  REQUIRE_MESSAGE(worker_status.has_value(), "the worker still runs 10 s after its requester's SIGKILL");
  CHECK(WIFSIGNALED(*worker_status));
  CHECK(WTERMSIG(*worker_status) == SIGTERM);
}

TEST_CASE("a child whose parent ended before it asked for its death signal dies of that signal at once (FS8, LL6)") {
  // The other side of FS8's race, made certain: the requester is gone before
  // the worker sets its signal, so the kernel will never send it. The status
  // must read as if it had (CI once saw exit 143 here instead).
  ForkServer subreaper_here(kWorker);  // FS2: the orphan comes to us
  int told[2];
  REQUIRE(::pipe(told) == 0);
  pid_t parent = ::fork();
  REQUIRE(parent >= 0);
  if (parent == 0) {
    pid_t child = ::fork();
    if (child == 0) {
      while (::getppid() == parent) ::usleep(100);  // adopted: its parent has ended
      castor::config::die_with_parent(SIGTERM, parent);
      ::_exit(0);  // not reached
    }
    ::_exit(::write(told[1], &child, sizeof child) == ssize_t(sizeof child) ? 0 : 1);
  }
  ::close(told[1]);
  pid_t child = -1;
  CHECK(::read(told[0], &child, sizeof child) == ssize_t(sizeof child));
  ::close(told[0]);
  auto parent_status = wait_exit(parent);
  REQUIRE(parent_status.has_value());
  REQUIRE(WIFEXITED(*parent_status));
  REQUIRE(WEXITSTATUS(*parent_status) == 0);
  REQUIRE(child > 0);
  auto child_status = wait_exit(child, 10s);
  if (!child_status) {
    ::kill(child, SIGKILL);
    wait_exit(child);
  }
  REQUIRE_MESSAGE(child_status.has_value(), "the adopted child still runs 10 s after it asked for its death signal");
  CHECK(WIFSIGNALED(*child_status));
  CHECK(WTERMSIG(*child_status) == SIGTERM);
}
