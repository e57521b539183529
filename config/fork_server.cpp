// The fork server: one loaded copy of a program forks the others.
#include "config/fork_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
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
//      in the worker on first use), no output buffered. A forked worker
//      then runs as an exec'd one would.
//  FS2. A worker is a child of the requester, as fork+exec makes it: the
//      server forks an intermediate that forks the worker and exits at
//      once; the kernel hands the orphan to the nearest child subreaper
//      (the requester, which made itself one before it started the server)
//      before the server reaps the intermediate and answers with the pid.
//      waitpid, kill, exit codes and signals work as before.
//  FS3. The worker gets what exec would have given it: the request's argv,
//      the requester's whole environment at the time of the request (not at
//      the server's start) plus the request's variables, the requester's
//      working folder, and stdout/stderr on the request's descriptor. Its
//      /proc/PID/cmdline and /proc/PID/environ show them too: they are
//      written over the server's own argument and environment areas, which
//      the requester padded when it started the server. So ps, pgrep -f and
//      tools (and tests) that find a worker by its RANK see it as an exec'd
//      one. The old strings there have no reader left (argv and environ now
//      point to copies); a library that kept a getenv() pointer from its
//      load would read the new text.
//  FS4. The server is a speed-up, never a condition: when it cannot start,
//      dies, or does not answer within kReplyBound, spawn() returns -1 and
//      the caller starts the process with exec. CASTOR_FORK_SERVER=0 turns
//      it off.
//  FS5. The server ends with its requester: it reads the end of its socket
//      (the requester's end is close-on-exec and never forked without exec,
//      so only the requester holds it) and exits at once. The requester's
//      destructor closes it and reaps it. Workers outlive the server.

namespace {

constexpr const char* kFdVariable = "CASTOR_FORK_SERVER_FD";
constexpr const char* kServerFlag = "--castor-fork-server";
constexpr int kServerFd = 3;                 // where the server finds its socket
constexpr const char* kRoomVariable = "CASTOR_FORK_SERVER_ROOM";
constexpr size_t kArgumentPad = 8192;        // FS3: room for a worker's argv in /proc/PID/cmdline
constexpr size_t kEnvironmentPad = 16384;    // FS3: and for what its environment has over the server's
constexpr int kReplyBoundMs = 30000;         // FS4: the first reply waits for the server's own load
constexpr size_t kMaxRequest = 1 << 20;

// --- the request: argv, environment, working folder (length-prefixed strings)

void put_string(std::string& out, const std::string& s) {
  auto n = uint32_t(s.size());
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out += s;
}

void put_list(std::string& out, const std::vector<std::string>& list) {
  auto n = uint32_t(list.size());
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
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
  std::string cwd;
};

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

// Turns this freshly forked process into the requested one.
void become(const Request& req, int out_fd, const ProcAreas& areas, int& argc, char**& argv) {
  if (out_fd >= 0) {
    ::dup2(out_fd, 1);
    ::dup2(out_fd, 2);
    if (out_fd > 2) ::close(out_fd);
  }
  if (!req.cwd.empty() && ::chdir(req.cwd.c_str()) != 0) {
    // As exec would: the worker starts wherever it can; its own paths say the rest.
  }
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

bool read_request(int sock, Request& req, int& out_fd, bool& ended) {
  std::string buffer(kMaxRequest, '\0');
  iovec iov{buffer.data(), buffer.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  out_fd = -1;
  if (n <= 0) {
    ended = true;  // FS5: the requester is gone
    return false;
  }
  for (auto* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&out_fd, CMSG_DATA(c), sizeof out_fd);
  RequestReader r{buffer.data(), buffer.data() + n};
  req.argv = r.list();
  req.env = r.list();
  req.cwd = r.string();
  return r.ok && !req.argv.empty() && !(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC));
}

void answer(int sock, int32_t pid_or_error) {
  while (::send(sock, &pid_or_error, sizeof pid_or_error, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

}  // namespace

void serve_forks_if_asked(int& argc, char**& argv) {
  const char* given = std::getenv(kFdVariable);
  if (!given || argc < 2 || std::strcmp(argv[1], kServerFlag) != 0) return;
  int sock = std::atoi(given);
  ::unsetenv(kFdVariable);
  ::fcntl(sock, F_SETFD, FD_CLOEXEC);
  auto areas = proc_areas();
  for (;;) {
    Request req;
    int out_fd = -1;
    bool ended = false;
    if (!read_request(sock, req, out_fd, ended)) {
      if (ended) ::_exit(0);
      if (out_fd >= 0) ::close(out_fd);
      answer(sock, -EINVAL);
      continue;
    }
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
      if (out_fd >= 0) ::close(out_fd);
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
        ::close(sock);
        ::close(pipe_fds[0]);
        ::close(pipe_fds[1]);
        become(req, out_fd, areas, argc, argv);
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
    if (out_fd >= 0) ::close(out_fd);
    answer(sock, reply);
  }
}

ForkServer::ForkServer(const std::string& executable) : executable_(executable) {
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
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, kFdVariable, std::strlen(kFdVariable)) != 0 &&
        std::strncmp(*e, kRoomVariable, std::strlen(kRoomVariable)) != 0)
      env_strings.emplace_back(*e);
  env_strings.push_back(std::string(kFdVariable) + "=" + std::to_string(kServerFd));
  env_strings.push_back(std::string(kRoomVariable) + "=" + std::string(kEnvironmentPad, ' '));  // FS3
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  int rc = ::posix_spawn(&server_pid_, exe.c_str(), &actions, nullptr, args, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    server_pid_ = -1;
    ::close(fds[0]);
    fail("cannot start " + executable_ + ": " + std::strerror(rc));
    return;
  }
  fd_ = fds[0];
}

ForkServer::~ForkServer() {
  std::lock_guard<std::mutex> lock(mtx_);
  fail("ended");
}

void ForkServer::fail(std::string why) {
  error_ = std::move(why);
  if (fd_ >= 0) ::close(fd_);  // FS5: the server reads the end and exits
  fd_ = -1;
  if (server_pid_ > 0) {
    ::kill(server_pid_, SIGKILL);  // it may still be loading; a bound either way
    while (::waitpid(server_pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  server_pid_ = -1;
}

pid_t ForkServer::server_pid() const {
  std::lock_guard<std::mutex> lock(mtx_);
  return server_pid_;
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
                        int out_fd) {
  std::lock_guard<std::mutex> lock(mtx_);
  if (fd_ < 0 || argv.empty()) return -1;
  // FS3: the environment now, with the request's variables over it.
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) merged.emplace(std::string(*e, size_t(eq - *e)), std::string(eq + 1));
  }
  for (const auto& [k, v] : env) merged[k] = v;
  std::vector<std::string> env_list;
  for (const auto& [k, v] : merged) env_list.push_back(k + "=" + v);
  char cwd[4096];
  std::string request;
  put_list(request, argv);
  put_list(request, env_list);
  put_string(request, ::getcwd(cwd, sizeof cwd) ? cwd : "");
  if (request.size() > kMaxRequest) return -1;  // too large for one request: exec takes it

  iovec iov{request.data(), request.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (out_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    auto* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &out_fd, sizeof out_fd);
  }
  ssize_t sent;
  do sent = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
  while (sent < 0 && errno == EINTR);
  if (sent != ssize_t(request.size())) {
    if (sent < 0 && errno == EMSGSIZE) return -1;  // this request only
    fail(std::string("the fork server took no request: ") + std::strerror(errno));
    return -1;
  }
  pollfd p{fd_, POLLIN, 0};
  int ready;
  do ready = ::poll(&p, 1, kReplyBoundMs);
  while (ready < 0 && errno == EINTR);
  int32_t reply = 0;
  if (ready != 1 || ::recv(fd_, &reply, sizeof reply, 0) != ssize_t(sizeof reply)) {
    fail(ready == 0 ? "the fork server did not answer in time" : "the fork server went away");
    return -1;
  }
  if (reply < 0) {
    error_ = std::string("the fork server could not fork: ") + std::strerror(-reply);
    return -1;
  }
  return pid_t(reply);
}

namespace {

struct Servers {
  std::mutex mtx;
  std::map<std::string, std::unique_ptr<ForkServer>> by_executable;  // ended at exit (FS5)
};

Servers& servers() {
  static Servers all;
  return all;
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

bool is_fork_server(pid_t pid) {
  auto& all = servers();
  std::lock_guard<std::mutex> lock(all.mtx);
  for (const auto& [exe, server] : all.by_executable)
    if (server && server->server_pid() == pid) return true;
  return false;
}

pid_t spawn_process(const std::string& executable, const std::vector<std::string>& argv,
                    const std::map<std::string, std::string>& env, int out_fd) {
  if (argv.empty()) return -1;
  if (auto* server = fork_server_for(executable))
    if (pid_t pid = server->spawn(argv, env, out_fd); pid > 0) return pid;
  // FS4: the usual way.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (out_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
    posix_spawn_file_actions_adddup2(&actions, out_fd, 2);
  }
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq && env.count(std::string(*e, size_t(eq - *e)))) continue;
    env_strings.emplace_back(*e);
  }
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> raw;
  for (auto& a : args) raw.push_back(a.data());
  raw.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, executable.c_str(), &actions, nullptr, raw.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

}  // namespace castor::config
