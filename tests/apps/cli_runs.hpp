// Runs the castor command as a user would, for the app tests: bounded,
// its output captured, its workers found by rank.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace castor::test {

struct CommandResult {
  int code = -1;       // exit code; -1 when it had to be killed
  std::string output;  // stdout and stderr
};

/// Runs the castor command with `args`, killing its whole process group when
/// `limit` passes (a hang fails the test with its output, not the CI).
/// `watch`, if given, sees the output so far after each read (to act on it
/// while the command runs).
CommandResult run_castor(const std::vector<std::string>& args, std::chrono::seconds limit = std::chrono::seconds(180),
                         const std::function<void(const std::string&)>& watch = {});

/// The process of `castor run`'s rank `rank` whose rank 0 listens on `port`
/// (from its environment), or -1.
pid_t worker_pid(int rank, const std::string& port);

}  // namespace castor::test
