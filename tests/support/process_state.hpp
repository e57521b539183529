// Whether a process has ended, read from /proc without reaping it: tests
// that watch a process which is not their child (a worker adopted by
// another subreaper) or must not take its status from its waiter.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

namespace castor::test {

// No such process, or a zombie nobody reaped yet.
inline bool process_ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  auto name_end = text.rfind(')');  // the name may hold spaces and parentheses
  return text.empty() || (name_end != std::string::npos && text.compare(name_end + 2, 1, "Z") == 0);
}

// Polls process_ended until `limit` has passed.
inline bool ends_within(pid_t pid, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!process_ended(pid)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace castor::test
