// Live state at the end of a program (issue 18, part 1): whatever is live
// when a worker ends -- by shutdown(), shutdown(false), the Worker's
// destructor or an exception unwinding through it, with its peer alive or
// killed -- no process of castor dies of a signal. Each worker runs in its
// own process (castor_test_worker), so a crash shows as its exit code.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "support/cluster.hpp"

using castor::test::ChildWorker;
using castor::test::eventually;
using castor::test::free_port;
using namespace std::chrono_literals;

namespace {
// Where rank 0 says that its state is live (a fresh name per run).
std::string ready_file(uint16_t port) {
  auto path = "/tmp/castor-test-endings-" + std::to_string(::getpid()) + "-" + std::to_string(port);
  std::remove(path.c_str());
  return path;
}
}  // namespace

TEST_CASE("an autograd context left live at the end: both processes exit 0, whatever the ending") {
  for (std::string ending : {"shutdown", "shutdown_false", "destructor", "unwind"}) {
    CAPTURE(ending);
    auto port = free_port();
    auto ready = ready_file(port);
    ChildWorker rank0(0, 2, port, {"context", ending, ready});
    ChildWorker rank1(1, 2, port, {"context", ending, ready});
    CHECK(rank0.wait_exit(60s) == 0);  // 139 (SIGSEGV) before the fix, both ranks
    CHECK(rank1.wait_exit(60s) == 0);
    std::remove(ready.c_str());
  }
}

TEST_CASE("a survivor holding an autograd context of a worker that was killed exits 0") {
  auto port = free_port();
  auto ready = ready_file(port);
  ChildWorker rank0(0, 2, port, {"context", "killed", ready});
  ChildWorker rank1(1, 2, port, {"context", "killed", ready});
  REQUIRE_MESSAGE(eventually([&] { return std::ifstream(ready).good(); }, 60s),
                  "rank 0 never made its call inside the context");
  rank0.kill();
  CHECK(rank0.wait_exit(10s) == 128 + SIGKILL);
  CHECK(rank1.wait_exit(60s) == 0);
  std::remove(ready.c_str());
}
