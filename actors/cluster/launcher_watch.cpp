// Note [Launcher lifeline]: a worker watches the launcher that started it.
#include "actors/cluster/launcher_watch.hpp"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <system_error>
#include <thread>

namespace castor::detail {

// Note [Launcher lifeline]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// L8 of Note [Launch policy] stops a job whose launcher is told to stop.
// A launcher that dies without a word (SIGKILL, the OOM killer) can tell
// nobody, and its workers ran on with no one to read their output or to end
// them. So a castor worker watches its launcher:
//  LL1. The launcher names itself in each worker's environment
//       (kLauncherVariable: its pid, its start time from /proc/PID/stat and
//       its grace in milliseconds), for a worker from the fork server as
//       for one it execs.
//  LL2. init_rpc starts the watch, once per process, before it joins (a
//       worker waiting for a master that will never come is watched too):
//       a pidfd of that pid, taken only while the pid still has the start
//       time named (a pid used again by another process is not the
//       launcher; once open, a pidfd names one process for good), and one
//       thread asleep in poll() on it. No pidfds (a kernel older than
//       5.3): no watch.
//  LL3. When the launcher ends, the worker gets what a live launcher would
//       have sent it (L8): SIGTERM, so that its handlers run, then SIGKILL
//       once the grace has passed if it still runs. A launcher already gone
//       when the watch starts has ended.
//  LL4. Only castor programs watch. One that a shell worker runs inherits
//       the variable and watches too; anything else a worker started is
//       L9's while the launcher lives.
namespace {

struct Launcher {
  pid_t pid = 0;
  unsigned long long started = 0;
  long long grace_ms = 0;
};

std::optional<Launcher> parse(const char* text) {
  Launcher l;
  int used = 0;
  if (std::sscanf(text, "%d %llu %lld%n", &l.pid, &l.started, &l.grace_ms, &used) != 3 || text[used] != '\0' ||
      l.pid <= 0 || l.started == 0 || l.grace_ms < 0)
    return std::nullopt;
  return l;
}

// LL3, on the watch's thread.
[[noreturn]] void end_with(const Launcher& l) {
  std::fprintf(stderr,
               "castor (pid %d): its launcher (pid %d) has ended; this worker ends as the launcher would have ended "
               "it (SIGTERM, then SIGKILL after %lld ms)\n",
               int(::getpid()), int(l.pid), l.grace_ms);
  std::fflush(stderr);
  ::kill(::getpid(), SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(l.grace_ms));
  ::kill(::getpid(), SIGKILL);
  for (;;) ::pause();
}

}  // namespace

unsigned long long process_start_time(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  auto name_end = text.rfind(')');  // the name may hold spaces and parentheses
  if (name_end == std::string::npos || name_end + 2 > text.size()) return 0;
  std::istringstream fields(text.substr(name_end + 2));
  std::string skipped;
  for (int i = 3; i < 22 && fields >> skipped; ++i) {
  }
  unsigned long long started = 0;
  fields >> started;
  return started;
}

std::string launcher_self_description(std::chrono::milliseconds grace) {
  return std::to_string(::getpid()) + " " + std::to_string(process_start_time(::getpid())) + " " +
         std::to_string(grace.count());
}

void watch_launcher() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* text = std::getenv(kLauncherVariable);
    if (!text || !*text) return;
    auto launcher = parse(text);
    if (!launcher) {
      std::fprintf(stderr, "castor: %s='%s' is not \"PID START GRACE_MS\": the launcher is not watched\n",
                   kLauncherVariable, text);
      return;
    }
    int fd = int(::syscall(SYS_pidfd_open, launcher->pid, 0));
    if (fd < 0 && errno != ESRCH) return;  // no pidfds here: no watch (LL2)
    bool gone = fd < 0 || process_start_time(launcher->pid) != launcher->started;
    try {
      std::thread([l = *launcher, fd, gone] {
        ::pthread_setname_np(::pthread_self(), "castor-lifeline");
        if (!gone) {
          pollfd p{fd, POLLIN, 0};
          while (::poll(&p, 1, -1) < 0 && errno == EINTR) {
          }
        }
        end_with(l);
      }).detach();
    } catch (const std::system_error& e) {  // out of threads: the worker runs unwatched, and says so
      if (fd >= 0) ::close(fd);
      std::fprintf(stderr, "castor: cannot watch the launcher (pid %d): %s\n", int(launcher->pid), e.what());
    }
  });
}

}  // namespace castor::detail
