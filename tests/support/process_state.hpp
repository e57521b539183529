// A process's state read from /proc without touching it: whether it has
// ended (not reaping it: a worker adopted by another subreaper, or one whose
// status its waiter must take) and which system call it waits in.
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

// Whether this kernel shows blocked system calls (/proc/PID/syscall); some
// kernels and sandboxes do not.
inline bool syscalls_visible() {
  std::ifstream call("/proc/self/syscall");
  std::string number;
  return bool(call >> number);
}

// Whether `pid` is blocked in system call `number` (SYS_... of
// <sys/syscall.h>), as the first field of /proc/PID/syscall says.
inline bool blocked_in(pid_t pid, long number) {
  std::ifstream call("/proc/" + std::to_string(pid) + "/syscall");
  std::string first;
  return call >> first && first == std::to_string(number);
}

}  // namespace castor::test
