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
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support/certs.hpp"
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
  std::remove((path + ".1").c_str());
  return path;
}

// Ranks 0 to world - 1 of one world, each a child process told `args`.
std::vector<std::unique_ptr<ChildWorker>> start_world(int world, uint16_t port, const std::vector<std::string>& args) {
  std::vector<std::unique_ptr<ChildWorker>> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(std::make_unique<ChildWorker>(r, world, port, args));
  return ranks;
}

// Each ending with the peers alive, then rank 0 killed (SIGKILL) while the
// state is live and the others shutting down. With `tls_dir`, a TLS world
// (test_worker_main.cpp reads CASTOR_TEST_TLS_DIR); `world` processes.
void check_every_ending(const std::string& kind, const std::string& tls_dir = "", int world = 2) {
  std::optional<castor::test::ChildTls> tls;
  if (!tls_dir.empty()) tls.emplace(tls_dir, true);  // the bytes in the sessions
  for (std::string ending : {"shutdown", "shutdown_false", "destructor", "unwind"}) {
    CAPTURE(ending);
    auto port = free_port();
    auto ready = ready_file(port);
    auto ranks = start_world(world, port, {kind, ending, ready});
    for (int r = 0; r < world; ++r) {
      CAPTURE(r);
      CHECK(ranks[size_t(r)]->wait_exit(60s) == 0);
    }
    std::remove(ready.c_str());
    std::remove((ready + ".1").c_str());
  }
  INFO("rank 0 killed");
  auto port = free_port();
  auto ready = ready_file(port);
  auto ranks = start_world(world, port, {kind, "killed", ready});
  REQUIRE_MESSAGE(eventually([&] { return std::ifstream(ready).good(); }, 60s), "rank 0 never made its state live");
  ranks[0]->kill();
  CHECK(ranks[0]->wait_exit(10s) == 128 + SIGKILL);
  for (int r = 1; r < world; ++r) {
    CAPTURE(r);
    CHECK(ranks[size_t(r)]->wait_exit(60s) == 0);
  }
  std::remove(ready.c_str());
  std::remove((ready + ".1").c_str());
}
}  // namespace

// 139 (SIGSEGV) on both ranks before AutogradRuntime::stop took its handles out.
TEST_CASE("an autograd context left live at the end: both processes exit 0, whatever the ending") {
  check_every_ending("context");
}
TEST_CASE("owner and user RRefs left live at the end (one in a static): both processes exit 0") {
  check_every_ending("rrefs");
}
TEST_CASE("a call still running at the end: both processes exit 0, whatever the ending") {
  check_every_ending("pending");
}
TEST_CASE("a push waiting in a round of a method run on arrival at the end: both processes exit 0, whatever the ending") {
  check_every_ending("arrival_round");
}
TEST_CASE("a distributed optimizer with a step in flight at the end: both processes exit 0") {
  check_every_ending("optimizer");
}
TEST_CASE("a bulk link with a transfer in flight at the end: both processes exit 0") {
  check_every_ending("bulk");
}
TEST_CASE("a TLS bulk link with a transfer in flight at the end: both processes exit 0") {
  check_every_ending("bulk", castor::test::make_certs("endings", {"worker0", "worker1"}));
}
TEST_CASE("a stream of small calls in flight at the end: both processes exit 0, whatever the ending") {
  check_every_ending("stream");
}
// G3 of Note [RRef protocol]: a fork borrowed by worker1, its fetch waiting
// on worker2 for a value 3 s away, rank 0's pending child live.
TEST_CASE("an RRef borrowed by a call, its fetch waiting at the end: all three processes exit 0, whatever the ending") {
  check_every_ending("borrow", "", 3);
}
// D2 of Note [Drain order]: worker1 sent worker2 its gradient early and is
// in a slow node of its own; the backward pass runs on all three ranks.
TEST_CASE("a backward pass with an early gradient in flight at the end: all three processes exit 0, whatever the ending") {
  check_every_ending("early_gradient", "", 3);
}
TEST_CASE("an inspection session open at the end: both processes exit 0, whatever the ending") {
  check_every_ending("inspector");
}
// Note [Shutdown bound]: a call stuck in user code for 10 minutes; every
// worker's graceful shutdown fails within its 3 s bound naming that call
// (checked by the workers), and every process exits.
TEST_CASE("a call stuck in user code: shutdown ends within its bound, naming the call, and both processes exit 0") {
  auto began = std::chrono::steady_clock::now();
  check_every_ending("stuck");
  // Five worlds whose endings each wait at most the 3 s bound (and a
  // 1.5 s call timeout); without the bound the first one never ends.
  CHECK(std::chrono::steady_clock::now() - began < 120s);
}
