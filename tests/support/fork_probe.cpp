#include "support/fork_probe.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include <ATen/ATen.h>

#include "config/fork_server.hpp"

namespace castor::test {
namespace {

int thread_count() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (auto* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
  }
  return n;
}

// /proc/self/cmdline with its NULs as '|', trailing ones dropped (as ps does).
std::string cmdline() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && s.back() == '\0') s.pop_back();
  for (auto& c : s)
    if (c == '\0') c = '|';
  return s;
}

// The value of `name` in /proc/self/environ (what ps e and tools read), or "(unset)".
std::string proc_environ(const std::string& name) {
  std::ifstream in("/proc/self/environ", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto key = std::string(1, '\0') + name + "=";
  auto at = (std::string(1, '\0') + all).find(key);
  if (at == std::string::npos) return "(unset)";
  auto begin = at + key.size() - 1;
  return all.substr(begin, all.find('\0', begin) - begin);
}

// The open descriptors, as numbers joined by ','.
std::string open_fds() {
  std::string out;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    int own = ::dirfd(d);
    while (auto* e = ::readdir(d))
      if (e->d_name[0] != '.' && std::atoi(e->d_name) != own) out += (out.empty() ? "" : ",") + std::string(e->d_name);
    ::closedir(d);
  }
  return out;
}

// The umask in octal, as the umask command prints it (set back at once:
// the probe has one thread here).
std::string umask_text() {
  mode_t mask = ::umask(0);
  ::umask(mask);
  char text[8];
  std::snprintf(text, sizeof text, "%04o", unsigned(mask));
  return text;
}

// FS7's witness: made while the program loads (in a fork server, before any
// fork), so a forked worker's exit skips its destructor and an exec'd one's
// runs it. It speaks only when asked, so other tests' workers stay quiet.
struct LoadTimeState {
  ~LoadTimeState() {
    if (!std::getenv("CASTOR_PROBE_TEARDOWN")) return;
    std::fputs("load-time teardown: ran\n", stdout);
    std::fflush(stdout);
  }
} load_time_state;

// `probe teardown N`: what FS7 keeps of an ending (the status, stdio not yet
// flushed, the exit handlers registered in main) and what it skips.
int teardown_probe(int status) {
  std::atexit([] { std::fputs("main's exit handler: ran\n", stdout); });
  std::fputs("unflushed: the last words", stdout);  // no newline, no flush: still in stdio's buffer
  return status;
}

}  // namespace

int fork_probe(int argc, char** argv) {
  if (argc > 3 && std::strcmp(argv[2], "teardown") == 0) return teardown_probe(std::atoi(argv[3]));
  int threads = thread_count();  // before anything of ours starts one
  auto fds = open_fds();
  struct sigaction pipe_action {};
  ::sigaction(SIGPIPE, nullptr, &pipe_action);
  sigset_t mask;
  ::sigprocmask(SIG_SETMASK, nullptr, &mask);
  std::string joined;
  for (int i = 0; i < argc; ++i) joined += (i ? "|" : "") + std::string(argv[i]);
  const char* var = std::getenv("CASTOR_PROBE_VAR");
  char cwd[4096] = "?";
  if (!::getcwd(cwd, sizeof cwd)) std::strcpy(cwd, "?");
  // BLAS after a fork: its pool was shut down in the server (FS1).
  auto sum = at::mm(at::ones({64, 64}), at::full({64, 64}, 2.0)).sum().item<double>();
  std::printf("argv: %s\nvar: %s\ncwd: %s\nthreads: %d\nmm: %.0f\nppid: %d\ncmdline: %s\nenviron: %s\n",
              joined.c_str(), var ? var : "(unset)", cwd, threads, sum, int(::getppid()), cmdline().c_str(),
              proc_environ("CASTOR_PROBE_VAR").c_str());
  std::printf("fds: %s\nsigpipe: %s\nusr2 blocked: %s\numask: %s\n", fds.c_str(),
              pipe_action.sa_handler == SIG_IGN ? "ignored" : "default", sigismember(&mask, SIGUSR2) ? "yes" : "no",
              umask_text().c_str());
  std::fflush(stdout);
  if (argc > 2 && std::strcmp(argv[2], "sleep") == 0) {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 3;
  }
  return argc > 2 ? std::atoi(argv[2]) : 0;
}

int fork_requester(int argc, char** argv) {
  config::ForkServer server(argv[0]);
  int death_signal = argc > 2 ? std::atoi(argv[2]) : 0;  // FS8
  pid_t worker = server.spawn({argv[0], "probe", "sleep"}, {}, -1, death_signal);
  std::printf("server %d\nworker %d\n", int(server.server_pid()), int(worker));
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::seconds(60));
  return 3;
}

}  // namespace castor::test
