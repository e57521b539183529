// B7's copy (actors/transport/bulk/same_host.cpp): a large copy out of a
// process's memory is split over two threads, and a host that cannot start
// the second thread still gets the whole copy on the calling thread.
#include <doctest/doctest.h>

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "actors/transport/bulk/same_host.hpp"

using castor::detail::bulk::copy_from_process;

namespace {

// 24 MiB and a tail: past the size from which the copy takes two threads,
// and not a whole number of pages.
std::vector<unsigned char> pattern() {
  std::vector<unsigned char> v((size_t(24) << 20) + 123);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<unsigned char>(i * 7 + i / 4096);
  return v;
}

uint64_t address_of(const std::vector<unsigned char>& v) { return uint64_t(reinterpret_cast<uintptr_t>(v.data())); }

// From here on, this process cannot start a thread: clone3 is "not
// implemented" (glibc then tries clone) and clone fails with EAGAIN, what
// a host out of threads answers.
bool forbid_threads() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
#ifdef __NR_clone3
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
#endif
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAGAIN),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

// The exit status of `pid`, waiting at most `limit`; -1 (and the child
// killed) past it.
int exit_status_within(pid_t pid, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

TEST_CASE("a large copy out of a process's memory arrives whole, split over two threads") {
  auto from = pattern();
  std::vector<unsigned char> into(from.size());
  REQUIRE(copy_from_process(int(::getpid()), address_of(from), into.data(), from.size()));
  CHECK(std::memcmp(into.data(), from.data(), from.size()) == 0);
}

TEST_CASE("a host that cannot start the copy's second thread still gets the whole copy on the calling thread") {
  auto from = pattern();
  std::vector<unsigned char> into(from.size());  // made before the fork: the child only copies
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Exit codes: 0 copied whole, 1 the filter did not take, 2 a thread
    // still started, 3 the copy failed, 4 it arrived torn, 5 it threw.
    if (!forbid_threads()) ::_exit(1);
    if (::syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, nullptr) != -1 || errno != EAGAIN) ::_exit(2);
    try {
      if (!copy_from_process(int(::getpid()), address_of(from), into.data(), from.size())) ::_exit(3);
    } catch (...) {
      ::_exit(5);  // never back into the test runner's frames in a forked copy of it
    }
    ::_exit(std::memcmp(into.data(), from.data(), from.size()) == 0 ? 0 : 4);
  }
  CHECK(exit_status_within(child, std::chrono::seconds(30)) == 0);
}
