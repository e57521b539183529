// Same-host copies of the bulk path (B7).
#include "actors/transport/bulk/same_host.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <system_error>
#include <thread>
#include <type_traits>

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

// B15: in static storage with a trivial destructor, so it stays readable
// for as long as the process lives, whatever else has been torn down.
std::atomic<uint64_t> revocations{0};
static_assert(std::is_trivially_destructible_v<std::atomic<uint64_t>>);

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

uint64_t revocation_word_address() { return uint64_t(reinterpret_cast<uintptr_t>(&revocations)); }

uint64_t revocations_so_far() { return revocations.load(); }

void revoke_copies() {
  revocations.fetch_add(1);
  // The freeing and reusing stores that follow must not become visible
  // before the new value (a release alone orders only what came before).
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool copy_still_valid(int pid, uint64_t address, uint64_t seen) {
  // The copy's loads before the word's (the sender's fence is the other half).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  uint64_t now = 0;
  return copy_span(pid, address, &now, sizeof now) && now == seen;
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
