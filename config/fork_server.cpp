// The fork server: one loaded copy of a program forks the others.
#include "config/fork_server.hpp"

#include "config/exec_environment.hpp"
#include "config/parent_death.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

extern char** environ;

namespace castor::config {

// Note [Fork server]
// ~~~~~~~~~~~~~~~~~~
// A castor process spends about a second of CPU before main() (the dynamic
// linker's relocations over the ~290 libraries libtorch pulls in, libtorch's
// operator registry). A world of 64 workers on 2 cores pays that 64 times
// before anyone says a word. So a program that starts copies of itself (the
// castor launcher, castor-bench, the tests' workers) loads once: a server
// process of the same executable waits at the top of main() and forks each
// worker from there.
//  FS1. The server forks from a state a fresh exec would reach too: every
//      library loaded and initialised, main() just entered, nothing else --
//      no CAF system, no thread of its own (OpenBLAS's pool, started by its
//      loader, is shut down by OpenBLAS's own fork handler and starts again
//      in the worker on first use), no output buffered (flushed before the
//      first fork). A forked worker then runs as an exec'd one would. What
//      it cannot have anew: the server's address-space layout, stack canary
//      and pointer guard are every worker's (as with any fork server).
//  FS2. A worker is a child of the requester, as fork+exec makes it: the
//      server forks an intermediate that forks the worker and exits at
//      once; the kernel hands the orphan to the nearest child subreaper
//      (the requester, which made itself one before it started the server)
//      before the server reaps the intermediate and answers with the pid,
//      and the worker waits for that before it runs. waitpid, kill, exit
//      codes and signals work as before.
//  FS3. The worker gets what exec would have given it: the request's argv,
//      the requester's whole environment at the time of the request (not at
//      the server's start) plus the request's variables, the requester's
//      working folder (by descriptor: a folder renamed since is still the
//      one), its signal mask, the signals it ignores and its umask, and
//      stdout/stderr on the request's descriptor. Its /proc/PID/cmdline and
//      /proc/PID/environ show them too: they are written over the server's
//      own argument and environment areas, which the requester padded when
//      it started the server (and which keep their length: what is left is
//      NULs, which ps and pgrep drop). So ps, pgrep -f and tools (and tests)
//      that find a worker by its RANK see it as an exec'd one. The old
//      strings there have no reader left (argv and environ now point to
//      copies); a library that kept a getenv() pointer from its load would
//      read the new text. Not carried: resource limits, nice value and CPU
//      affinity are the server's (the requester's when it started it).
//  FS4. What libraries read from the environment while they load (kLoadTime
//      prefixes: the dynamic linker's and glibc's tunables, OpenMP's,
//      OpenBLAS's, MKL's, libtorch's) was read once, in the server: a
//      request whose values of them differ from the server's start is
//      refused, and that worker is exec'd.
//  FS5. The server is a speed-up, never a condition: when it cannot start,
//      dies, or does not answer within the reply bound, spawn() returns -1
//      and the caller starts the process with exec. A worker runs only once
//      its requester has taken its pid: it first reads one byte from a pipe
//      only the requester writes, after the reply. A requester that gave up
//      closes the pipe, and a worker forked late ends at once (127) without
//      running: a worker is never started twice. CASTOR_FORK_SERVER=0 turns
//      the server off.
//  FS6. The server ends with its requester: it reads the end of its socket
//      (the requester's end is close-on-exec) and exits at once. A
//      ForkServer closes, kills and reaps its server in the process that
//      made it, never in a child forked from that process. Workers outlive
//      the server.
//  FS7. A forked worker ends without tearing down what the server loaded:
//      once main() has returned (its locals gone) or exit() was called, and
//      the handlers registered since the fork have run, the worker flushes
//      its stdio and leaves with _exit and the same status. What it skips
//      is the teardown of the libraries' load-time state: libtorch's static
//      destructors deregister every operator, rewriting the registry's pages
//      that the worker shares with the server (each a copy-on-write fault),
//      and glibc frees the heap piece by piece. Measured on 2 cores, three
//      pairs: 128 forked workers took 10.3-13.1 s to end after their
//      world's shutdown with that teardown, 54-112 ms without it.
//      An exec'd worker (a program of the user's, FS4, FS5) ends as usual,
//      and so does a worker built with AddressSanitizer or ThreadSanitizer,
//      so that the sanitizer run still checks the teardown it would skip.
//  FS8. A request may name a death signal (PR_SET_PDEATHSIG, as a
//      fork+exec that sets one between the two gives: the launcher's LL6 of
//      Note [Launcher lifeline]). The worker sets it once the requester is
//      its parent (FS2; the kernel makes an adopted orphan the child of the
//      subreaper's first live thread, its main thread), and a worker whose
//      requester ended before that (the orphan went elsewhere) dies of the
//      signal at once: its status reads the same whichever came first.
namespace {

constexpr const char* kFdVariable = "CASTOR_FORK_SERVER_FD";
constexpr const char* kServerFlag = "--castor-fork-server";
constexpr int kServerFd = 3;                 // where the server finds its socket
constexpr const char* kRoomVariable = "CASTOR_FORK_SERVER_ROOM";
constexpr const char* kOwnerVariable = "CASTOR_FORK_SERVER_OWNER";  // FS2, FS8: the requester's pid
constexpr size_t kArgumentPad = 8192;        // FS3: room for a worker's argv in /proc/PID/cmdline
constexpr size_t kEnvironmentPad = 16384;    // FS3: and for what its environment has over the server's
constexpr size_t kMaxRequest = 1 << 20;
constexpr uint32_t kUmaskUnknown = ~0u;
constexpr int kMaxFds = 3;                   // the go pipe, the folder, the output
// FS4: variables that libraries read while they load.
constexpr const char* kLoadTime[] = {"LD_", "GLIBC_TUNABLES", "MALLOC_", "OMP_", "OPENBLAS_", "GOTO", "MKL_", "TORCH_"};

bool read_at_load(const std::string& name) {
  for (const char* prefix : kLoadTime)
    if (name.compare(0, std::strlen(prefix), prefix) == 0) return true;
  return false;
}

// --- the request: length-prefixed strings and numbers

void put_u32(std::string& out, uint32_t n) { out.append(reinterpret_cast<const char*>(&n), sizeof n); }

void put_string(std::string& out, const std::string& s) {
  put_u32(out, uint32_t(s.size()));
  out += s;
}

void put_list(std::string& out, const std::vector<std::string>& list) {
  put_u32(out, uint32_t(list.size()));
  for (const auto& s : list) put_string(out, s);
}

struct RequestReader {
  const char* p;
  const char* end;
  bool ok = true;

  uint32_t u32() {
    uint32_t n = 0;
    if (size_t(end - p) < sizeof n) {
      ok = false;
      return 0;
    }
    std::memcpy(&n, p, sizeof n);
    p += sizeof n;
    return n;
  }
  std::string string() {
    auto n = u32();
    if (!ok || size_t(end - p) < n) {
      ok = false;
      return {};
    }
    std::string s(p, n);
    p += n;
    return s;
  }
  std::vector<std::string> list() {
    auto n = u32();
    std::vector<std::string> out;
    for (uint32_t i = 0; ok && i < n; ++i) out.push_back(string());
    return out;
  }
};

struct Request {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "NAME=value"
  std::string signal_mask;       // a sigset_t's bytes
  std::string ignored;           // the numbers of the signals set to SIG_IGN, one byte each
  uint32_t umask = kUmaskUnknown;
  bool has_out = false;
  uint32_t death_signal = 0;     // FS8
};

// --- the requester's side

// The umask, read without changing it (umask() would, for every thread).
uint32_t current_umask() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "Umask:") {
      std::string octal;
      in >> octal;
      return uint32_t(std::strtoul(octal.c_str(), nullptr, 8));
    }
    in.ignore(1 << 16, '\n');
  }
  return kUmaskUnknown;
}

std::string ignored_signals() {
  std::string out;
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction sa {};
    if (::sigaction(sig, nullptr, &sa) == 0 && sa.sa_handler == SIG_IGN) out += char(sig);
  }
  return out;
}

// --- the worker's side (FS3)

// Where the kernel reads /proc/self/cmdline and /proc/self/environ from:
// fields 48-51 of /proc/self/stat (arg_start, arg_end, env_start, env_end).
struct ProcAreas {
  char* args_begin = nullptr;
  char* args_end = nullptr;
  char* env_begin = nullptr;
  char* env_end = nullptr;
};

ProcAreas proc_areas() {
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = stat.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream fields(stat.substr(close + 2));  // field 3 onwards
  std::string field;
  unsigned long long value[4] = {};
  for (int index = 3; index <= 51 && fields >> field; ++index)
    if (index >= 48) value[index - 48] = std::strtoull(field.c_str(), nullptr, 10);
  if (value[1] <= value[0] || value[3] <= value[2]) return {};
  return {reinterpret_cast<char*>(value[0]), reinterpret_cast<char*>(value[1]), reinterpret_cast<char*>(value[2]),
          reinterpret_cast<char*>(value[3])};
}

// Writes `strings` NUL-terminated into [begin, end), as many whole ones as
// fit, and NULs the rest.
void write_area(char* begin, char* end, const std::vector<std::string>& strings) {
  if (!begin || end <= begin) return;
  size_t room = size_t(end - begin), at = 0;
  for (const auto& s : strings) {
    if (at + s.size() + 1 > room) break;
    std::memcpy(begin + at, s.c_str(), s.size() + 1);
    at += s.size() + 1;
  }
  std::memset(begin + at, 0, room - at);
}

// What exec would have put on the new process's stack: its argv and
// environment strings, for as long as the process lives (and reachable from
// here for leak checkers).
struct ExecStrings {
  std::vector<std::string> env;
  std::vector<std::string> args;
  std::vector<char*> argv;
};
ExecStrings* exec_strings = nullptr;

// Signal mask and ignored signals as the requester had them; handlers that
// a library installed while it loaded stay, as they would after exec.
void take_signals(const Request& req) {
  if (req.signal_mask.size() == sizeof(sigset_t)) {
    sigset_t mask;
    std::memcpy(&mask, req.signal_mask.data(), sizeof mask);
    ::sigprocmask(SIG_SETMASK, &mask, nullptr);
  }
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    bool ignore = req.ignored.find(char(sig)) != std::string::npos;
    struct sigaction now {};
    if (::sigaction(sig, nullptr, &now) != 0) continue;
    if (ignore && now.sa_handler != SIG_IGN) ::signal(sig, SIG_IGN);
    if (!ignore && now.sa_handler == SIG_IGN) ::signal(sig, SIG_DFL);
  }
}

// FS7: runs before the exit handlers registered at load (those came first).
void leave_without_teardown(int status, void*) {
  std::cout.flush();  // the standard streams outlive this (never torn down here)
  std::cerr.flush();
  std::clog.flush();
  std::fflush(nullptr);
  ::_exit(status);
}

// Not with a sanitizer (or, when one comes, a coverage build) whose work is
// done at exit.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kExitIsChecked = true;
#else
constexpr bool kExitIsChecked = false;
#endif

void skip_teardown_at_exit() {
  if (!kExitIsChecked) ::on_exit(leave_without_teardown, nullptr);
}

// Turns this freshly forked process into the requested one.
void become(const Request& req, int cwd_fd, int out_fd, const ProcAreas& areas, int& argc, char**& argv) {
  if (::fchdir(cwd_fd) != 0) {
    // Only a folder we may no longer enter fails here; the worker starts in the server's, its paths say the rest.
  }
  ::close(cwd_fd);
  if (out_fd >= 0) {
    ::dup2(out_fd, 1);
    ::dup2(out_fd, 2);
    ::fcntl(1, F_SETFD, 0);  // dup2 onto itself keeps close-on-exec: a worker that execs keeps its output
    ::fcntl(2, F_SETFD, 0);
    if (out_fd > 2) ::close(out_fd);
    if (out_fd == 0) ::close(0);  // the requester had no stdin: neither has the worker
  }
  take_signals(req);
  if (req.umask != kUmaskUnknown) ::umask(mode_t(req.umask));
  exec_strings = new ExecStrings{req.env, req.argv, {}};
  ::clearenv();
  for (auto& kv : exec_strings->env) ::putenv(kv.data());
  for (auto& a : exec_strings->args) exec_strings->argv.push_back(a.data());
  exec_strings->argv.push_back(nullptr);
  argc = int(req.argv.size());
  argv = exec_strings->argv.data();
  // The old strings are not used any more (argv and environ now point to
  // copies), so their areas take the new ones: ps, pgrep -f and a look at
  // /proc/PID/environ see the worker as exec made it (FS3).
  write_area(areas.args_begin, areas.args_end, req.argv);
  write_area(areas.env_begin, areas.env_end, req.env);
  // glibc names the program by argv[0] in its messages; keep it the new one.
  program_invocation_name = argv[0];
  auto slash = std::strrchr(argv[0], '/');
  program_invocation_short_name = slash ? slash + 1 : argv[0];
}

// --- the server's side

// The next request and its descriptors (go pipe, folder, output if any).
// false with `ended` when the requester is gone.
bool read_request(int sock, std::vector<char>& buffer, Request& req, std::vector<int>& fds, bool& ended) {
  iovec iov{buffer.data(), buffer.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxFds * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  fds.clear();
  if (n <= 0) {
    ended = true;  // FS6: the requester is gone
    return false;
  }
  for (auto* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds.push_back(fd);
    }
  }
  RequestReader r{buffer.data(), buffer.data() + n};
  req.argv = r.list();
  req.env = r.list();
  req.signal_mask = r.string();
  req.ignored = r.string();
  req.umask = r.u32();
  req.has_out = r.u32() != 0;
  req.death_signal = r.u32();
  return r.ok && req.death_signal < uint32_t(NSIG) && !req.argv.empty() && fds.size() == (req.has_out ? 3u : 2u) &&
         !(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC));
}

void answer(int sock, int32_t pid_or_error) {
  while (::send(sock, &pid_or_error, sizeof pid_or_error, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

void close_all(std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
  fds.clear();
}

// FS5: the requester writes one byte once it has the worker's pid; nothing
// (the pipe closed) if it gave up on this request.
bool requester_took_pid(int go_fd) {
  char go = 0;
  ssize_t n;
  do n = ::read(go_fd, &go, 1);
  while (n < 0 && errno == EINTR);
  ::close(go_fd);
  return n == 1;
}

}  // namespace

void serve_forks_if_asked(int& argc, char**& argv) {
  const char* given = std::getenv(kFdVariable);
  if (!given || argc < 2 || std::strcmp(argv[1], kServerFlag) != 0) return;
  int sock = std::atoi(given);
  ::unsetenv(kFdVariable);
  ::fcntl(sock, F_SETFD, FD_CLOEXEC);
  std::fflush(nullptr);  // FS1: nothing buffered is printed by every worker
  // FS2: every worker's parent. A server whose requester ended while it
  // started (it was adopted) has no one to serve (FS6): were it to serve a
  // request sent before that, its worker's parent would be another process.
  const char* owner = std::getenv(kOwnerVariable);
  const pid_t requester = owner ? pid_t(std::atol(owner)) : ::getppid();
  ::unsetenv(kOwnerVariable);
  if (::getppid() != requester) ::_exit(0);
  auto areas = proc_areas();
  std::vector<char> buffer(kMaxRequest);
  std::vector<int> fds;
  for (;;) {
    Request req;
    bool ended = false;
    if (!read_request(sock, buffer, req, fds, ended)) {
      if (ended) ::_exit(0);
      close_all(fds);
      answer(sock, -EINVAL);
      continue;
    }
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
      close_all(fds);
      answer(sock, -errno);
      continue;
    }
    pid_t middle = ::fork();
    if (middle == 0) {
      pid_t intermediate = ::getpid();
      pid_t worker = ::fork();
      if (worker == 0) {
        // FS2 from main()'s first line: the requester is the parent (a
        // worker that sets PR_SET_PDEATHSIG or asks getppid() sees it).
        while (::getppid() == intermediate) ::usleep(20);
        if (req.death_signal != 0) {  // FS8
          die_with_parent(int(req.death_signal), requester);
        }
        ::close(sock);
        ::close(pipe_fds[0]);
        ::close(pipe_fds[1]);
        if (!requester_took_pid(fds[0])) ::_exit(127);  // FS5: it gave up on us and started another
        become(req, fds[1], req.has_out ? fds[2] : -1, areas, argc, argv);
        skip_teardown_at_exit();  // FS7
        return;  // into main(), as the requested process
      }
      int32_t reply = worker > 0 ? int32_t(worker) : -errno;
      ssize_t written = ::write(pipe_fds[1], &reply, sizeof reply);
      ::_exit(written == ssize_t(sizeof reply) ? 0 : 1);  // FS2: the worker goes to the subreaper
    }
    int32_t reply = -EAGAIN;
    if (middle > 0) {
      ::close(pipe_fds[1]);
      pipe_fds[1] = -1;
      ssize_t got;
      do got = ::read(pipe_fds[0], &reply, sizeof reply);
      while (got < 0 && errno == EINTR);
      if (got != ssize_t(sizeof reply)) reply = -ECHILD;
      int status = 0;
      while (::waitpid(middle, &status, 0) < 0 && errno == EINTR) {
      }
    } else {
      reply = -errno;
    }
    ::close(pipe_fds[0]);
    if (pipe_fds[1] >= 0) ::close(pipe_fds[1]);
    close_all(fds);
    answer(sock, reply);
  }
}

ForkServer::ForkServer(const std::string& executable, std::chrono::milliseconds reply_bound)
    : executable_(executable), reply_bound_(reply_bound), owner_(::getpid()) {
  std::lock_guard<std::mutex> lock(mtx_);
  // FS2: before the server exists, so that its descendants know of us.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    fail(std::string("cannot become a child subreaper: ") + std::strerror(errno));
    return;
  }
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) {
    fail(std::string("socketpair: ") + std::strerror(errno));
    return;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], kServerFd);  // dup2 clears close-on-exec
  // FS1: none of the requester's other descriptors (another worker's pipe)
  // lives on in the server and in every worker forked from it.
  posix_spawn_file_actions_addclosefrom_np(&actions, kServerFd + 1);
  std::string exe = executable_, flag = kServerFlag, pad(kArgumentPad, ' ');
  char* args[] = {exe.data(), flag.data(), pad.data(), nullptr};
  std::vector<std::string> env_strings;
  std::map<std::string, std::string> load_time;  // FS4: by name, the first of each as getenv() finds it
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    auto name = kv.substr(0, eq);
    if (name == kFdVariable || name == kRoomVariable || name == kOwnerVariable) continue;
    if (read_at_load(name) && eq != std::string::npos) load_time.emplace(name, kv.substr(eq + 1));
    env_strings.push_back(std::move(kv));
  }
  for (const auto& [k, v] : load_time) load_time_env_.push_back(k + "=" + v);
  env_strings.push_back(std::string(kFdVariable) + "=" + std::to_string(kServerFd));
  env_strings.push_back(std::string(kOwnerVariable) + "=" + std::to_string(owner_));
  env_strings.push_back(std::string(kRoomVariable) + "=" + std::string(kEnvironmentPad, ' '));  // FS3
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, exe.c_str(), &actions, nullptr, args, c_strings(env_strings).data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    fail("cannot start " + executable_ + ": " + std::strerror(rc));
    return;
  }
  server_pid_ = pid;
  fd_ = fds[0];
}

ForkServer::~ForkServer() {
  std::lock_guard<std::mutex> lock(mtx_);
  fail("ended");
}

void ForkServer::fail(std::string why) {
  error_ = std::move(why);
  if (fd_ >= 0) ::close(fd_);  // FS6: the server reads the end and exits
  fd_ = -1;
  pid_t pid = server_pid_.exchange(-1);
  if (pid > 0 && ::getpid() == owner_) {  // FS6: not from a child that was forked without exec
    ::kill(pid, SIGKILL);  // it may still be loading; a bound either way
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

bool ForkServer::reap_if_dead(pid_t pid) {
  if (pid <= 0 || server_pid_.load() != pid) return false;
  std::lock_guard<std::mutex> lock(mtx_);
  if (server_pid_.load() != pid) return false;
  fail("the fork server died");  // a zombie of ours: its pid is still its own until this reaps it
  return true;
}

bool ForkServer::running() const {
  std::lock_guard<std::mutex> lock(mtx_);
  return fd_ >= 0;
}

std::string ForkServer::last_error() const {
  std::lock_guard<std::mutex> lock(mtx_);
  return error_;
}

pid_t ForkServer::spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                        int out_fd, int death_signal) {
  std::lock_guard<std::mutex> lock(mtx_);
  if (fd_ < 0 || argv.empty() || death_signal < 0 || death_signal >= NSIG) return -1;
  auto env_list = environment_with(env);  // FS3: the environment now, with the request's variables over it
  std::vector<std::string> load_time;
  for (const auto& kv : env_list)
    if (read_at_load(kv.substr(0, kv.find('=')))) load_time.push_back(kv);
  if (load_time != load_time_env_) {  // FS4 (both sorted by name)
    error_ = "a variable read while libraries load differs from the fork server's start: exec'd instead";
    return -1;
  }
  sigset_t mask;
  ::pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  std::string request;
  put_list(request, argv);
  put_list(request, env_list);
  put_string(request, std::string(reinterpret_cast<const char*>(&mask), sizeof mask));
  put_string(request, ignored_signals());
  put_u32(request, current_umask());
  put_u32(request, out_fd >= 0 ? 1 : 0);
  put_u32(request, uint32_t(death_signal));
  if (request.size() > kMaxRequest) {
    error_ = "the request is larger than the fork server takes: exec'd instead";
    return -1;
  }
  int go[2];
  if (::pipe2(go, O_CLOEXEC) != 0) {
    error_ = std::string("pipe: ") + std::strerror(errno);
    return -1;
  }
  int cwd_fd = ::open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (cwd_fd < 0) {
    error_ = std::string("cannot open the working folder: ") + std::strerror(errno);
    ::close(go[0]);
    ::close(go[1]);
    return -1;
  }
  int passed[kMaxFds] = {go[0], cwd_fd, out_fd};
  size_t count = out_fd >= 0 ? 3 : 2;
  iovec iov{request.data(), request.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxFds * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(count * sizeof(int));
  auto* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(count * sizeof(int));
  std::memcpy(CMSG_DATA(c), passed, count * sizeof(int));
  ssize_t sent;
  do sent = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
  while (sent < 0 && errno == EINTR);
  int send_error = errno;
  ::close(go[0]);  // the server has its own copies now
  ::close(cwd_fd);
  if (sent != ssize_t(request.size())) {
    ::close(go[1]);
    if (sent < 0 && send_error == EMSGSIZE) {  // larger than the socket takes: this request only
      error_ = "the request is larger than the fork server's socket takes: exec'd instead";
      return -1;
    }
    fail(std::string("the fork server took no request: ") + std::strerror(send_error));
    return -1;
  }
  auto deadline = std::chrono::steady_clock::now() + reply_bound_;
  int ready = 0;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    ready = ::poll(&p, 1, int(std::max<int64_t>(0, left.count())));
    if (ready >= 0 || errno != EINTR) break;
  }
  int32_t reply = 0;
  if (ready != 1 || ::recv(fd_, &reply, sizeof reply, 0) != ssize_t(sizeof reply)) {
    ::close(go[1]);  // FS5: a worker forked after this ends without running
    fail(ready == 0 ? "the fork server did not answer within " + std::to_string(reply_bound_.count()) + " ms"
                    : "the fork server went away");
    return -1;
  }
  if (reply < 0) {
    ::close(go[1]);
    error_ = std::string("the fork server could not fork: ") + std::strerror(-reply);
    return -1;
  }
  char go_byte = 1;
  ssize_t written;
  do written = ::write(go[1], &go_byte, 1);  // FS5: the worker may run
  while (written < 0 && errno == EINTR);
  ::close(go[1]);
  return pid_t(reply);
}

namespace {

struct Servers {
  std::mutex mtx;
  std::map<std::string, std::unique_ptr<ForkServer>> by_executable;
};

// Never destroyed: a thread may still spawn while the process exits, and
// each server ends by itself when its socket closes with the process (FS6).
Servers& servers() {
  static auto* all = new Servers;
  return *all;
}

}  // namespace

ForkServer* fork_server_for(const std::string& executable) {
  const char* off = std::getenv("CASTOR_FORK_SERVER");
  if (off && std::strcmp(off, "0") == 0) return nullptr;
  auto& all = servers();
  std::lock_guard<std::mutex> lock(all.mtx);
  auto& server = all.by_executable[executable];
  if (!server) server = std::make_unique<ForkServer>(executable);
  return server->running() ? server.get() : nullptr;
}

bool reap_if_fork_server(pid_t pid) {
  auto& all = servers();
  std::lock_guard<std::mutex> lock(all.mtx);
  for (const auto& [exe, server] : all.by_executable)
    if (server && server->reap_if_dead(pid)) return true;
  return false;
}

pid_t spawn_process(const std::string& executable, const std::vector<std::string>& argv,
                    const std::map<std::string, std::string>& env, int out_fd) {
  if (argv.empty()) return -1;
  if (auto* server = fork_server_for(executable))
    if (pid_t pid = server->spawn(argv, env, out_fd); pid > 0) return pid;
  // FS5: the usual way.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (out_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
    posix_spawn_file_actions_adddup2(&actions, out_fd, 2);
  }
  auto env_strings = environment_with(env);
  auto args = argv;
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, executable.c_str(), &actions, nullptr, c_strings(args).data(),
                         c_strings(env_strings).data());
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

}  // namespace castor::config
