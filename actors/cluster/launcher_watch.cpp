// Note [Launcher lifeline]: a worker watches the launcher that started it.
#include "actors/cluster/launcher_watch.hpp"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
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
//       (kLauncherVariable: its pid, its start time from /proc/PID/stat,
//       its grace in milliseconds and its pid and time namespaces), for a
//       worker from the fork server as for one it execs. A launcher that
//       cannot read its own start time (no /proc) names nothing.
//  LL2. init_rpc starts the watch, once per process, before it joins (a
//       worker waiting for a master that will never come is watched too):
//       a pidfd of that pid (once open, it names one process for good) and
//       one thread asleep in poll() on it, its signals blocked.
//  LL3. Only a launcher seen alive is watched: in the worker's own
//       namespaces (a worker in a container or under unshare sees another
//       pid, or the same pid and other start times), with the start time
//       named (a pid used again is not the launcher). Whatever cannot be
//       told (no pidfds, no /proc, the launcher already gone, a variable
//       left to a process started after the job) is not watched: a watch
//       must never end a worker whose launcher lives.
//  LL4. When the launcher ends, the worker gets what a live launcher would
//       have sent it (L8): SIGTERM, so that its handlers run, then SIGKILL
//       once the grace has passed if it still runs. Its line on stderr
//       goes to the launcher's pipe, whose reader is gone: the watch's
//       thread blocks SIGPIPE, so the write fails instead of killing the
//       worker before its SIGTERM.
//  LL5. Processes that call init_rpc watch, and launchers (run_processes):
//       a castor program that a shell worker runs does (it inherits the
//       variable), and so does a castor run in a worker. A launcher is sent
//       no signal: the end of its own launcher is an L8 stop of its job
//       (one stop, with its grace and L9's sweep, however it is between or
//       after rounds). A program that is not castor's does not watch (L9
//       covers what a worker started while the launcher lives).
//  LL6. Before init_rpc there is no watch, and a launcher that dies then
//       would leave a worker busy with its own start (loading its data)
//       running on. So a worker the launcher execs gets a death signal
//       between fork and exec (PR_SET_PDEATHSIG: SIGTERM when the
//       launcher's thread that started it, run_processes's, ends; it lasts
//       across exec, on the worker's main thread), and so does one forked
//       from the fork server once the launcher is its parent (FS2, FS8); a
//       child whose launcher ended before that ends at once. The watch
//       takes over: once it runs on a verified launcher (LL3), a worker
//       whose parent that is drops the SIGTERM, so that one end is not two
//       stops (when init_rpc runs on its main thread: the setting is the
//       thread's). A worker that watches nothing (LL3's doubts) keeps it:
//       the kernel's signal cannot name the wrong process. It reaches only
//       the launcher's children: a program under a worker's shell still
//       has LL3's hole before init_rpc.
namespace {

struct Launcher {
  pid_t pid = 0;
  unsigned long long started = 0;
  long long grace_ms = 0;
  std::string namespaces;
};

// LL3: this process's pid and time namespaces ("-" where unknown).
std::string namespaces_here() {
  std::string out;
  for (const char* ns : {"/proc/self/ns/pid", "/proc/self/ns/time"}) {
    char link[128] = {0};
    auto n = ::readlink(ns, link, sizeof link - 1);
    out += n > 0 ? std::string(link, size_t(n)) : std::string("-");
    out += ',';
  }
  return out;
}

std::optional<Launcher> parse(const char* text) {
  Launcher l;
  int used = 0;
  if (std::sscanf(text, "%d %llu %lld %n", &l.pid, &l.started, &l.grace_ms, &used) != 3 || l.pid <= 0 ||
      l.started == 0 || l.grace_ms < 0)
    return std::nullopt;
  l.namespaces = text + used;
  if (l.namespaces.empty() || l.namespaces.find(' ') != std::string::npos) return std::nullopt;
  return l;
}

// LL4, on the watch's thread (its signals blocked).
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
  auto started = process_start_time(::getpid());
  if (started == 0) return {};  // LL1: no /proc: nothing a worker could check
  return std::to_string(::getpid()) + " " + std::to_string(started) + " " + std::to_string(grace.count()) + " " +
         namespaces_here();
}

void watch_launcher(void (*on_end)()) {
  static std::once_flag once;
  std::call_once(once, [on_end] {
    const char* text = std::getenv(kLauncherVariable);
    if (!text || !*text) return;
    auto launcher = parse(text);
    if (!launcher) {
      std::fprintf(stderr, "castor: %s='%s' is not \"PID START GRACE_MS NAMESPACES\": the launcher is not watched\n",
                   kLauncherVariable, text);
      return;
    }
    if (launcher->namespaces != namespaces_here()) return;  // LL3: its pid means another process here
    int fd = int(::syscall(SYS_pidfd_open, launcher->pid, 0));
    if (fd < 0) return;  // LL3: no pidfds, or the launcher is gone already
    if (process_start_time(launcher->pid) != launcher->started) {  // LL3: gone, or not to be told
      ::close(fd);
      return;
    }
    // LL4: the thread starts with every signal blocked (SIGPIPE above all;
    // the others go to the process's other threads); this one's mask is
    // put back whatever happens.
    sigset_t all, before;
    ::sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, &before);
    try {
      std::thread([l = *launcher, fd, on_end] {
        ::pthread_setname_np(::pthread_self(), "castor-lifeline");
        pollfd p{fd, POLLIN, 0};
        while (::poll(&p, 1, -1) < 0 && errno == EINTR) {
        }
        ::close(fd);
        if (on_end) return on_end();  // LL5
        end_with(l);
      }).detach();
      // LL6: the watch runs on the launcher seen alive, so it sees its end;
      // the death signal the launcher gave us would be a second. (Should
      // the launcher end just before this, both come, the kernel's first:
      // a worker's handler may see two SIGTERMs, and a nested launcher's
      // outer_launcher_ended does not count a second stop.)
      int death_signal = 0;
      if (::getppid() == launcher->pid && ::prctl(PR_GET_PDEATHSIG, &death_signal) == 0 && death_signal == SIGTERM)
        ::prctl(PR_SET_PDEATHSIG, 0);
    } catch (const std::exception& e) {  // out of threads or memory: the worker runs unwatched, and says so
      ::close(fd);
      std::fprintf(stderr, "castor: cannot watch the launcher (pid %d): %s\n", int(launcher->pid), e.what());
    }
    ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  });
}

}  // namespace castor::detail
