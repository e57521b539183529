// Process launcher: fork/exec with piped output, poll loop that prefixes each
// line, and fail-fast termination of the siblings.
#include "local_launch.hpp"

#include "actors/transport/sockets.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <optional>

namespace castor::apps {
namespace {

struct Child {
  std::string name;
  pid_t pid = -1;
  int fd = -1;  // stdout and stderr, merged
  std::string partial;
  bool redrawn = false;  // a progress redraw is on the terminal's last line
  bool exited = false;
  int code = 0;
};

// Prints the child's complete lines with its name in front. A segment ended
// by '\r' is a progress-bar redraw: shown in place on a terminal, dropped in
// a log (the bar's final state ends with '\n' and is kept).
void flush_lines(Child& c, bool all) {
  static const bool terminal = ::isatty(1) == 1;
  size_t pos;
  while ((pos = c.partial.find_first_of("\r\n")) != std::string::npos) {
    auto segment = c.partial.substr(0, pos);
    bool redraw = c.partial[pos] == '\r';
    c.partial.erase(0, pos + 1);
    if (redraw) {
      if (terminal && !segment.empty()) std::printf("\r[%s] %s\033[K", c.name.c_str(), segment.c_str());
      c.redrawn = c.redrawn || (terminal && !segment.empty());
      continue;
    }
    std::printf("%s[%s] %s\n", c.redrawn ? "\r\033[K" : "", c.name.c_str(), segment.c_str());
    c.redrawn = false;
  }
  if (all && !c.partial.empty()) {
    std::printf("[%s] %s\n", c.name.c_str(), c.partial.c_str());
    c.partial.clear();
  }
  std::fflush(stdout);
}

pid_t spawn(const ProcessSpec& spec, int out_fd) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::dup2(out_fd, 1);
  ::dup2(out_fd, 2);
  ::close(out_fd);
  for (const auto& [k, v] : spec.env) ::setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(argv[0], argv.data());
  std::fprintf(stderr, "cannot start %s: %s\n", argv[0], std::strerror(errno));
  ::_exit(127);
}

}  // namespace

std::string self_executable() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "castor";
  buf[n] = 0;
  return buf;
}

uint16_t free_local_port() { return castor::detail::net::free_local_port(); }

LaunchResult run_processes(const std::vector<ProcessSpec>& specs, std::chrono::milliseconds grace) {
  std::vector<Child> children;
  for (const auto& spec : specs) {
    int p[2];
    if (::pipe(p) != 0) continue;
    Child c;
    c.name = spec.name;
    c.pid = spawn(spec, p[1]);
    ::close(p[1]);
    c.fd = p[0];
    children.push_back(std::move(c));
  }
  LaunchResult result;
  bool killing = false;  // SIGTERM sent; SIGKILL at kill_at
  auto kill_at = std::chrono::steady_clock::now();
  size_t alive = children.size();
  while (alive > 0) {
    std::vector<pollfd> fds;
    for (auto& c : children)
      if (c.fd >= 0) fds.push_back(pollfd{c.fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 100);
    for (auto& c : children) {
      if (c.fd < 0) continue;
      char buf[4096];
      int flags = ::fcntl(c.fd, F_GETFL);
      ::fcntl(c.fd, F_SETFL, flags | O_NONBLOCK);
      ssize_t n;
      while ((n = ::read(c.fd, buf, sizeof(buf))) > 0) c.partial.append(buf, size_t(n));
      flush_lines(c, false);
      if (n == 0) {
        ::close(c.fd);
        c.fd = -1;
        flush_lines(c, true);
      }
    }
    for (auto& c : children) {
      if (c.exited) continue;
      int status = 0;
      if (::waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
      c.exited = true;
      --alive;
      c.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (c.code != 0 && result.failed.empty()) {
        result.failed = c.name;
        result.exit_code = c.code;
        std::printf("[launch] %s exited with %d; stopping the others\n", c.name.c_str(), c.code);
        for (auto& o : children)
          if (!o.exited) ::kill(o.pid, SIGTERM);
        killing = true;
        kill_at = std::chrono::steady_clock::now() + grace;
      }
    }
    if (killing && std::chrono::steady_clock::now() > kill_at) {
      for (auto& o : children)
        if (!o.exited) ::kill(o.pid, SIGKILL);
      killing = false;
    }
  }
  for (auto& c : children) {
    if (c.fd >= 0) {
      char buf[4096];
      ssize_t n;
      while ((n = ::read(c.fd, buf, sizeof(buf))) > 0) c.partial.append(buf, size_t(n));
      flush_lines(c, true);
      ::close(c.fd);
    }
  }
  return result;
}

}  // namespace castor::apps
