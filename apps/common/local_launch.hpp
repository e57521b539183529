// Starts worker processes on this host, prefixes their output with the worker
// name, stops the rest when one fails, and reports how they ended.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace castor::apps {

struct ProcessSpec {
  std::string name;                          // prefix of its output lines
  std::vector<std::string> argv;             // argv[0] is the program
  std::map<std::string, std::string> env;    // added to this process' environment
};

struct LaunchResult {
  int exit_code = 0;          // 0 when every process exited with 0
  std::string failed;         // the first process that failed, if any
};

/// Runs all processes to completion. If one exits non-zero (or is killed),
/// the others get SIGTERM, then SIGKILL after `grace`.
LaunchResult run_processes(const std::vector<ProcessSpec>& specs,
                           std::chrono::milliseconds grace = std::chrono::seconds(5));

/// The path of the running executable (/proc/self/exe).
std::string self_executable();

/// A free TCP port on 127.0.0.1.
uint16_t free_local_port();

}  // namespace castor::apps
