// Process launcher: fork/exec with piped output, poll loop that prefixes each
// line, and the job's end.
//
// Note [Launch policy]
// ~~~~~~~~~~~~~~~~~~~~
//  L1. Rank 0 (the leader: the driver, the name store, the shutdown
//      coordinator) ends the job: when it exits, the others get `grace` to
//      finish by themselves (they are leaving too after a graceful
//      shutdown), then SIGTERM, then SIGKILL. Its exit code is the job's.
//  L2. A worker that exits with an error of its own (a non-zero code) fails
//      the job at once, as before: its error is the app's, not a death.
//  L3. Any other worker that dies of a signal (SIGKILL, the OOM killer) is
//      reported and left to the app: rank 0's calls to it fail, its
//      failure handlers run (README, "When workers fail"), and it decides
//      whether the job carries on. An app without a handler still ends,
//      because its calls to the dead worker fail.
//  L4. On a host without rank 0 (castor launch of part of a cluster), the
//      launch ends when its own workers have; a worker lost there is its
//      exit code, as this host's verdict.
//  L5. Under a restart policy (Note [Restart policy], restarts.cpp) a worker
//      that dies of a signal the launcher did not send stops the others at
//      once instead: the job will be started again whole. The deaths are
//      reported (LaunchResult::died) whoever ended first: a worker that
//      died and the rank 0 that failed because of it are often reaped in
//      the same round, and the death is taken first -- after a clean exit
//      of rank 0 in that round, which ends the job well (L1).
//  L6. Before L3 and L5, a worker other than rank 0 that dies of a signal
//      the launcher did not send while the job runs (rank 0 has not ended)
//      may be started again in its place, alone (the caller's Respawn:
//      Note [Restart policy], R2); the others carry on.
//  L7. A worker that cannot be started (no descriptor for its pipe, no
//      process) fails the job at once, naming it and the cause; the others
//      are stopped as in L2 and the job's code is 127, as a shell's.
//  L8. The launcher told to stop (SIGINT, SIGTERM, SIGHUP; SIGPIPE when
//      what reads its output went away) stops the job: SIGTERM to every
//      worker, SIGKILL after `grace` or at a second such signal. Every
//      death from then on is the launcher's doing: nothing is started
//      again, and the job's code is 128 + the signal. Without this a
//      killed launcher left its workers running.
//  L9. What a worker started goes with it: each SIGTERM or SIGKILL of the
//      launcher's goes to the worker's descendants too (a worker that is a
//      shell script running its program without exec would otherwise
//      leave the program running after the job). They are remembered (pid
//      and start time, so a pid used again is never hit): one that ignores
//      SIGTERM and outlives its worker gets SIGKILL when the grace ends.
//  L10. A launcher that dies unannounced (SIGKILL, the OOM killer) still
//      ends its job: each castor worker watches it and, when it ends, gets
//      the SIGTERM and then the SIGKILL that L8 would have sent (Note
//      [Launcher lifeline] in actors/cluster/launcher_watch.cpp). So does
//      a launcher started by a worker of another job's (a nested castor
//      run): the outer launcher's end is an L8 stop of its job (LL5).
#include "local_launch.hpp"

#include "actors/cluster/launcher_watch.hpp"
#include "actors/transport/sockets.hpp"
#include "config/exec_environment.hpp"
#include "config/fork_server.hpp"
#include "config/parent_death.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

namespace castor::apps {
namespace {

namespace fs = std::filesystem;

struct Child {
  std::string name;
  pid_t pid = -1;
  int fd = -1;  // stdout and stderr, merged
  std::string partial;
  bool redrawn = false;  // a progress redraw is on the terminal's last line
  bool exited = false;
  bool leader = false;
  int code = 0;
  std::string cannot_start;  // why it did not start (L7); pid is then -1
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

// A forked child of a threaded launcher may make only async-signal-safe
// calls until it execs (another thread may hold malloc's lock at the
// fork), and until then it runs the launcher's signal handlers: a SIGTERM
// sent to a child that had not exec'd yet ran ours (in test_restarts,
// doctest's crash report, printed by a copy of the test under load). So
// the child's argv and environment are built before the fork, every signal
// is blocked across it, and the child puts each handled signal back to its
// default before it unblocks them and execs.
pid_t spawn(const ProcessSpec& spec, int out_fd) {
  // Note [Fork server]: castor's own workers (castor worker, an app's rank)
  // fork from a loaded castor instead of loading libtorch each.
  if (!spec.argv.empty() && spec.argv[0] == self_executable())
    if (auto* server = config::fork_server_for(spec.argv[0]))
      if (pid_t pid = server->spawn(spec.argv, spec.env, out_fd, SIGTERM); pid > 0) return pid;  // LL6 (FS8)
  auto env = config::environment_with(spec.env);
  auto args = spec.argv;
  auto envp = config::c_strings(env);
  auto argv = config::c_strings(args);
  const std::string failed = "cannot start " + (spec.argv.empty() ? std::string() : spec.argv[0]) + ": ";
  sigset_t all, before;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &before);
  const pid_t launcher = ::getpid();
  pid_t pid = ::fork();
  if (pid != 0) {
    ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
    return pid;
  }
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction action {};
    if (::sigaction(sig, nullptr, &action) != 0 || action.sa_handler == SIG_DFL || action.sa_handler == SIG_IGN) continue;
    action.sa_handler = SIG_DFL;
    action.sa_flags = 0;
    ::sigaction(sig, &action, nullptr);
  }
  // LL6 of Note [Launcher lifeline]: until its watch starts, the child
  // gets a SIGTERM when this thread ends (run_processes's, which waits for
  // every child it starts), delivered once its mask is put back; if the
  // launcher has ended already (the child was adopted), it dies of that
  // signal at once.
  config::die_with_parent(SIGTERM, launcher);
  ::sigprocmask(SIG_SETMASK, &before, nullptr);
  ::dup2(out_fd, 1);
  ::dup2(out_fd, 2);
  ::close(out_fd);
  ::execve(argv[0], argv.data(), envp.data());
  const char* why = ::strerrordesc_np(errno);
  if (!why) why = "unknown error";
  auto say = [](const char* text, size_t n) { return ::write(2, text, n) >= 0; };
  (void)(say(failed.data(), failed.size()) && say(why, std::strlen(why)) && say("\n", 1));
  ::_exit(127);
}

// L8: what the handlers saw (lock-free atomics: a handler may run on any
// thread). One run at a time per process.
std::atomic<int> stop_signal{0};
std::atomic<int> stop_signals_seen{0};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler may only touch lock-free atomics");

extern "C" void note_stop_signal(int sig) {
  // Our own writes after the reader left raise SIGPIPE again: not a second stop.
  if (sig == SIGPIPE && stop_signals_seen.load() > 0) return;
  stop_signal.store(sig);
  stop_signals_seen.fetch_add(1);
}

// LL5 of Note [Launcher lifeline]: the launcher that started this one has
// ended (set on the watch's thread). A stop of the job, as if by SIGTERM,
// in the round that runs and in any round after it.
std::atomic<bool> outer_launcher_gone{false};

void outer_launcher_ended() {
  outer_launcher_gone.store(true);
  if (stop_signals_seen.load() > 0) return;  // stopping already: not a second stop
  stop_signal.store(SIGTERM);
  int none = 0;
  stop_signals_seen.compare_exchange_strong(none, 1);
}

// L8's handlers for the length of one run, the caller's put back after it
// (a test runner's crash handlers, or the defaults). A signal the caller
// ignores stays ignored (nohup's SIGHUP: the job goes on, and its workers
// inherit the ignoring). spawn() gives each child the defaults back for
// the handled ones before it execs.
class StopSignals {
 public:
  StopSignals() {
    bool gone = outer_launcher_gone.load();  // LL5: a round after the outer launcher's end stops at once
    stop_signal = gone ? SIGTERM : 0;
    stop_signals_seen = gone ? 1 : 0;
    struct sigaction action {};
    action.sa_handler = note_stop_signal;
    action.sa_flags = SA_RESTART;      // the launcher's own writes are not cut short
    ::sigfillset(&action.sa_mask);    // one stop at a time: none lost to another
    for (size_t i = 0; i < kCount; ++i) {
      if (::sigaction(kSignals[i], nullptr, &before_[i]) != 0 || before_[i].sa_handler == SIG_IGN) continue;
      installed_[i] = ::sigaction(kSignals[i], &action, nullptr) == 0;
    }
  }
  ~StopSignals() {
    for (size_t i = 0; i < kCount; ++i)
      if (installed_[i]) ::sigaction(kSignals[i], &before_[i], nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  static constexpr size_t kCount = 4;
  static constexpr int kSignals[kCount] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
  struct sigaction before_[kCount] {};
  bool installed_[kCount] = {};
};

// L9: a process as the launcher saw it: its pid and when it started (field
// 22 of /proc/PID/stat), so that a pid used again later is never signalled.
struct Process {
  pid_t pid = 0;
  unsigned long long started = 0;
};

// The processes `pid` started, and theirs, from /proc's lists of children
// (none where the kernel keeps no such lists). Read when the launcher
// signals, before the worker ends and its children are orphaned. A task
// that ends while it is read is skipped.
std::vector<Process> descendants_of(pid_t pid) {
  constexpr size_t kMost = 4096;  // a fork bomb is not walked to its end
  std::vector<Process> found;
  std::vector<pid_t> todo{pid};
  while (!todo.empty() && found.size() < kMost) {
    pid_t parent = todo.back();
    todo.pop_back();
    std::error_code error;
    fs::directory_iterator task("/proc/" + std::to_string(parent) + "/task", error), end;
    for (; !error && task != end; task.increment(error)) {
      std::ifstream children(task->path() / "children");
      pid_t child = 0;
      while (children >> child && found.size() < kMost) {
        found.push_back(Process{child, detail::process_start_time(child)});
        todo.push_back(child);
      }
    }
  }
  return found;
}

// Signals `p` unless it is gone or its pid now names another process.
void signal_process(const Process& p, int sig) {
  if (p.started != 0 && detail::process_start_time(p.pid) == p.started) ::kill(p.pid, sig);
}

// Note [Fork server], FS2: a launcher that started a fork server is a child
// subreaper, so the orphans of its workers' own children (a helper process
// of a worker that died) come to it; they are reaped here and never stay
// zombies. Only the first waitable child is seen without reaping it: one of
// ours waits for the launch loop, and the strays behind it for the next
// round. A fork server that died is reaped by its ForkServer. A process that
// is no subreaper (a test calling run_processes) has no strays of ours.
void reap_strays(const std::vector<Child>& children) {
  int subreaper = 0;
  if (::prctl(PR_GET_CHILD_SUBREAPER, &subreaper) != 0 || !subreaper) return;
  for (;;) {
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
    for (const auto& c : children)
      if (c.pid == info.si_pid) return;
    if (!config::reap_if_fork_server(info.si_pid)) ::waitpid(info.si_pid, nullptr, WNOHANG);
  }
}

}  // namespace

void report_lost(const LaunchResult& result, const std::string& command) {
  if (result.lost.empty()) return;
  std::string names;
  for (const auto& l : result.lost) names += (names.empty() ? "" : ", ") + l;
  std::fprintf(stderr, "%s: %zu worker(s) lost while the job went on: %s\n", command.c_str(), result.lost.size(),
               names.c_str());
}

std::string self_executable() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "castor";
  buf[n] = 0;
  return buf;
}

uint16_t free_local_port() { return castor::detail::net::free_local_port(); }

LaunchResult run_processes(const std::vector<ProcessSpec>& specs, std::chrono::milliseconds grace,
                           bool stop_on_death, const Respawn& respawn) {
  std::vector<Child> children;
  children.reserve(specs.size());  // L6 replaces a child in place: pointers into it stay valid
  StopSignals stop_signals;  // L8
  // L10: each worker watches this launcher (Note [Launcher lifeline]), and
  // a launcher that a worker of another started (castor run in a job)
  // watches that one: its end is an L8 stop of this job (LL5).
  detail::watch_launcher(outer_launcher_ended);
  const std::string launcher = detail::launcher_self_description(grace);
  auto start = [&launcher](const ProcessSpec& given) {
    ProcessSpec spec = given;
    if (!launcher.empty()) spec.env[detail::kLauncherVariable] = launcher;
    Child c;
    c.name = spec.name;
    c.leader = spec.leader;
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) {  // no other child holds this one's pipe open
      c.cannot_start = std::string("no pipe for its output: ") + std::strerror(errno);
      return c;
    }
    c.pid = spawn(spec, p[1]);
    int why = errno;
    ::close(p[1]);
    if (c.pid > 0) {
      c.fd = p[0];
    } else {
      ::close(p[0]);
      c.cannot_start = std::string("no process: ") + std::strerror(why);
    }
    return c;
  };
  LaunchResult result;
  std::string cannot_start;  // L7: the first worker that did not start
  for (const auto& spec : specs) {
    auto c = start(spec);
    if (c.pid > 0) {
      children.push_back(std::move(c));
      continue;
    }
    std::printf("[launch] cannot start %s (%s); stopping the others\n", c.name.c_str(), c.cannot_start.c_str());
    std::fflush(stdout);
    result.exit_code = 127;
    result.failed = c.name;
    cannot_start = c.name;
    break;  // the job cannot run: start no more
  }
  bool has_leader = false;
  for (const auto& spec : specs) has_leader = has_leader || spec.leader;
  using Clock = std::chrono::steady_clock;
  // none -> waiting (L1: rank 0 ended well) -> terminating (SIGTERM sent) -> killing (SIGKILL sent)
  enum class Ending { none, waiting, terminating, killing } ending = Ending::none;
  auto next_step = Clock::now();  // when `ending` moves on
  // L9: each worker with what it started, and what earlier signals found
  // under workers that have ended since (a program that outlived its shell).
  std::vector<Process> signalled;
  auto signal_others = [&](int sig) {
    for (auto& o : children) {
      if (o.exited) continue;
      for (const auto& p : descendants_of(o.pid))
        if (std::none_of(signalled.begin(), signalled.end(),
                         [&](const Process& q) { return q.pid == p.pid && q.started == p.started; }))
          signalled.push_back(p);  // once, however often it is signalled
      ::kill(o.pid, sig);
    }
    for (const auto& p : signalled) signal_process(p, sig);
  };
  auto terminate_others = [&] {
    signal_others(SIGTERM);
    ending = Ending::terminating;
    next_step = Clock::now() + grace;
  };
  size_t alive = children.size();
  if (!cannot_start.empty()) terminate_others();  // L7
  bool stopping = false;  // L8: told to stop; every death since is ours
  int stops_handled = 0;
  while (alive > 0) {
    std::vector<pollfd> fds;
    for (auto& c : children)
      if (c.fd >= 0) fds.push_back(pollfd{c.fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 100);
    // Every exit of this round first, then the deaths before the other
    // exits: a killed worker and the rank 0 that failed because of it may
    // end in the same round, and the death is the cause (L5).
    std::vector<std::pair<Child*, int>> exits;
    for (auto& c : children) {
      if (c.exited) continue;
      int status = 0;
      if (::waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
      c.exited = true;
      --alive;
      exits.emplace_back(&c, status);
    }
    reap_strays(children);
    if (stop_signals_seen != stops_handled) {  // L8: read after this round's exits were reaped, so a worker
      // killed by the same Ctrl-C as the launcher is ours
      stops_handled = stop_signals_seen;
      int sig = stop_signal;
      if (!stopping) {
        stopping = true;
        result.exit_code = 128 + sig;
        result.failed.clear();
        result.stopped_by = sig;
        const char* abbrev = ::sigabbrev_np(sig);
        std::string name = abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
        std::fprintf(stderr, "[launch] got %s: stopping the job's workers (SIGTERM, then SIGKILL after %lld ms)\n",
                     name.c_str(), (long long)grace.count());
        terminate_others();
      } else if (ending != Ending::killing) {
        std::fprintf(stderr, "[launch] got another stop signal: killing the job's workers now\n");
        signal_others(SIGKILL);
        ending = Ending::killing;
      }
    }
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
    // Clean exits first (rank 0 ended well: what dies after it is not the
    // job's end, L1), then the deaths (L5), then the failed exits.
    auto order = [](int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : WIFSIGNALED(status) ? 1 : 2; };
    std::stable_sort(exits.begin(), exits.end(),
                     [&](const auto& a, const auto& b) { return order(a.second) < order(b.second); });
    const auto ending_before = ending;  // the signals of this round's exits were not ours unless sent before it
    for (auto& [child, status] : exits) {
      auto& c = *child;
      bool signaled = WIFSIGNALED(status);
      c.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      auto died = c.name + " (killed by signal " + std::to_string(signaled ? WTERMSIG(status) : 0) + ")";
      bool ours = stopping || ending_before == Ending::killing ||
                  (ending_before == Ending::terminating && WTERMSIG(status) == SIGTERM);
      if (signaled && !ours && !c.leader && ending == Ending::none && respawn) {  // L6
        if (auto spec = respawn(Death{c.name, WTERMSIG(status)})) {
          result.restarted.push_back(Death{c.name, WTERMSIG(status)});
          if (c.fd >= 0) {  // what it wrote before dying
            char buf[4096];
            ssize_t n;
            while ((n = ::read(c.fd, buf, sizeof(buf))) > 0) c.partial.append(buf, size_t(n));
            flush_lines(c, true);
            ::close(c.fd);
            c.fd = -1;
          }
          auto again = start(*spec);
          if (again.pid > 0) {
            c = std::move(again);
            ++alive;
            continue;
          }
          std::printf("[launch] cannot start %s again (%s)\n", c.name.c_str(), again.cannot_start.c_str());
        }
      }
      if (signaled && !ours) result.died.push_back(Death{c.name, WTERMSIG(status)});
      if (c.leader && c.code == 0 && ending == Ending::none) {  // L1
        ending = Ending::waiting;
        next_step = Clock::now() + grace;
      }
      if (ending >= Ending::terminating || c.code == 0) continue;  // we stopped it, or it ended well
      if (c.leader) {  // L1
        result.exit_code = c.code;
        result.failed = c.name;
        if (signaled)
          std::printf("[launch] %s (rank 0) died (killed by signal %d); stopping the others\n", c.name.c_str(),
                      WTERMSIG(status));
        else
          std::printf("[launch] %s (rank 0) exited with %d; stopping the others\n", c.name.c_str(), c.code);
        terminate_others();
      } else if (ending == Ending::waiting) {
        std::printf("[launch] %s exited with %d after rank 0 ended\n", c.name.c_str(), c.code);
        result.lost.push_back(signaled ? died : c.name + " (exit code " + std::to_string(c.code) + ")");
      } else if (signaled && stop_on_death) {  // L5
        result.exit_code = c.code;
        result.failed = c.name;
        std::printf("[launch] %s died; stopping the others\n", died.c_str());
        terminate_others();
      } else if (signaled) {  // L3
        result.lost.push_back(died);
        std::printf("[launch] %s died; the job goes on: rank 0's app decides\n", died.c_str());
        if (!has_leader && result.exit_code == 0) {  // L4
          result.exit_code = c.code;
          result.failed = c.name;
        }
      } else {  // L2
        result.failed = c.name;
        result.exit_code = c.code;
        std::printf("[launch] %s exited with %d; stopping the others\n", c.name.c_str(), c.code);
        terminate_others();
      }
    }
    if (alive == 0 || ending == Ending::none || Clock::now() < next_step) continue;
    if (ending == Ending::waiting) {
      for (auto& o : children)
        if (!o.exited) std::printf("[launch] rank 0 has ended; stopping %s, still running\n", o.name.c_str());
      terminate_others();
    } else if (ending == Ending::terminating) {
      signal_others(SIGKILL);
      ending = Ending::killing;
    }
    std::fflush(stdout);
  }
  // L9: what outlived its worker after a SIGTERM (a program that handles it,
  // under a shell that did not) has the rest of the grace, then SIGKILL.
  auto still_running = [&] {
    return std::any_of(signalled.begin(), signalled.end(),
                       [](const Process& p) { return p.started != 0 && detail::process_start_time(p.pid) == p.started; });
  };
  if (ending == Ending::terminating)
    while (still_running() && Clock::now() < next_step) ::poll(nullptr, 0, 50);
  for (const auto& p : signalled) signal_process(p, SIGKILL);
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
