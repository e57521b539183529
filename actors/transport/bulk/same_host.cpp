// Same-host copies of the bulk path (B7).
#include "actors/transport/bulk/same_host.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <system_error>
#include <thread>

namespace castor::detail::bulk {
namespace {

// process_vm_readv in a loop (it may copy less than asked).
bool copy_span(int pid, uint64_t address, void* into, uint64_t n) {
  auto* dst = static_cast<char*>(into);
  while (n > 0) {
    iovec local{dst, n}, remote{reinterpret_cast<void*>(address), n};
    auto r = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    dst += r, address += uint64_t(r), n -= uint64_t(r);
  }
  return true;
}

}  // namespace

// B7's copy. A large one runs on two threads: one core's copy does not use
// up the memory bandwidth (castor-bench rpc: echo_64MiB_vs_memcpy_floor_x).
bool copy_from_process(int pid, uint64_t address, void* into, uint64_t n) {
  constexpr uint64_t kSplitFrom = uint64_t(8) << 20;
  if (n < kSplitFrom || std::thread::hardware_concurrency() < 2) return copy_span(pid, address, into, n);
  uint64_t half = (n / 2) & ~uint64_t(4095);
  bool second_ok = false;
  int second_errno = 0;
  std::thread second;
  try {
    second = std::thread([&] {
      second_ok = copy_span(pid, address + half, static_cast<char*>(into) + half, n - half);
      second_errno = errno;
    });
  } catch (const std::system_error&) {
    return copy_span(pid, address, into, n);  // a host out of threads: one copy, on this thread
  }
  bool first_ok = copy_span(pid, address, into, half);
  second.join();
  if (first_ok && !second_ok) errno = second_errno;  // the caller names why from errno
  return first_ok && second_ok;
}

const std::string& host_identity() {
  static const std::string id = [] {
    std::string boot;
    if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
      char buf[64] = {0};
      if (std::fgets(buf, sizeof buf, f)) boot = buf;
      std::fclose(f);
    }
    char ns[128] = {0};
    auto n = ::readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
    if (boot.empty() || n <= 0) return std::string();
    return boot + "/" + std::string(ns, size_t(n));
  }();
  return id;
}

}  // namespace castor::detail::bulk
