// Starts worker processes on this host, prefixes their output with the worker
// name, and ends the job as Note [Launch policy] (local_launch.cpp) says.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace castor::apps {

struct ProcessSpec {
  std::string name;                          // prefix of its output lines
  std::vector<std::string> argv;             // argv[0] is the program
  std::map<std::string, std::string> env;    // added to this process' environment
  bool leader = false;                       // rank 0: its end is the job's end
};

struct Death {
  std::string name;
  int signal = 0;
};

struct LaunchResult {
  int exit_code = 0;          // the job's verdict (Note [Launch policy])
  std::string failed;         // the process whose exit decided a failure, if any
  std::vector<std::string> lost;  // "worker2 (killed by signal 9)": died while the job went on
  std::vector<Death> died;        // every worker killed by a signal the launcher did not send, in the order seen
  std::vector<Death> restarted;   // deaths answered by starting the worker again (L6), in order
  int stopped_by = 0;             // the signal that told the launcher to stop the job (L8), or 0
};

/// L6 of Note [Launch policy]: asked when a worker other than rank 0 dies of
/// a signal the launcher did not send, while the job runs; the process to
/// start in its place, or nothing (the death is then handled as L3/L5 say).
using Respawn = std::function<std::optional<ProcessSpec>(const Death& death)>;

/// Runs the processes until the job ends (Note [Launch policy]); those still
/// running then get SIGTERM, then SIGKILL after `grace`. `stop_on_death`:
/// a worker killed by a signal stops the job (L5).
LaunchResult run_processes(const std::vector<ProcessSpec>& specs,
                           std::chrono::milliseconds grace = std::chrono::seconds(5), bool stop_on_death = false,
                           const Respawn& respawn = {});

/// Prints the workers lost while the job went on (Note [Launch policy], L3).
void report_lost(const LaunchResult& result, const std::string& command);

/// The path of the running executable (/proc/self/exe).
std::string self_executable();

/// A free TCP port on 127.0.0.1.
uint16_t free_local_port();

}  // namespace castor::apps
