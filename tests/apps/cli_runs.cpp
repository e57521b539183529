// The castor command run from the app tests.
#include "apps/cli_runs.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "support/errors.hpp"

namespace castor::test {

namespace fs = std::filesystem;

CommandResult run_castor(const std::vector<std::string>& args, std::chrono::seconds limit,
                         const std::function<void(const std::string&)>& watch) {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(p[1], 1);
    ::dup2(p[1], 2);
    ::close(p[0]);
    ::close(p[1]);
    std::vector<char*> argv{const_cast<char*>(CASTOR_CLI_PATH)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(p[1]);
  CommandResult r;
  auto deadline = std::chrono::steady_clock::now() + limit;
  char buf[4096];
  for (;;) {
    pollfd fd{p[0], POLLIN, 0};
    if (::poll(&fd, 1, 200) > 0) {
      ssize_t n = ::read(p[0], buf, sizeof(buf));
      if (n == 0) break;  // every writer is gone
      if (n > 0) r.output.append(buf, size_t(n));
    }
    if (watch) watch(r.output);  // also when nothing came: a watcher may act on time
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(-pid, SIGKILL);
      r.output += "\n[test] killed after " + std::to_string(limit.count()) + " s";
      break;
    }
  }
  ::close(p[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::kill(-pid, SIGKILL);  // strays of a failed run
  if (WIFEXITED(status) && r.output.find("[test] killed") == std::string::npos) r.code = WEXITSTATUS(status);
  return r;
}

pid_t worker_pid(int rank, const std::string& port) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    auto name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream env(entry.path() / "environ", std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    std::string with_nul = std::string(1, '\0') + all;
    if (contains(with_nul, std::string(1, '\0') + "RANK=" + std::to_string(rank) + '\0') &&
        contains(with_nul, std::string(1, '\0') + "MASTER_PORT=" + port + '\0'))
      return pid_t(std::stol(name));
  }
  return -1;
}

}  // namespace castor::test
