// A worker that died comes back under a new incarnation (Note [Rejoin] in
// actors/cluster/rejoin.cpp): the same rank and name in a new process, which
// the survivors take back. Each worker is a real process (rank 0 is this
// one), on loopback TCP; each hazard of the rejoin has its own check.
#include <doctest/doctest.h>

#include <signal.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "actors/runtime/testing.hpp"
#include "rref/rref.hpp"
#include "support/cluster.hpp"
#include "support/errors.hpp"

using namespace castor;
using castor::test::contains;
using castor::test::error_of;
using castor::test::eventually;
using std::chrono::milliseconds;

namespace {

// A child started while this lives is the given life of its rank (the
// launcher sets CASTOR_INCARNATION the same way).
struct Incarnation {
  explicit Incarnation(int k) { ::setenv("CASTOR_INCARNATION", std::to_string(k).c_str(), 1); }
  ~Incarnation() { ::unsetenv("CASTOR_INCARNATION"); }
  Incarnation(const Incarnation&) = delete;
  Incarnation& operator=(const Incarnation&) = delete;
};

// Failure messages as rank 0's handler heard them (on another thread).
struct Heard {
  std::mutex mtx;
  std::vector<std::string> messages;
  void add(const WorkerFailure& f) {
    std::lock_guard<std::mutex> lock(mtx);
    messages.push_back(f.message());
  }
  std::vector<std::string> all() {
    std::lock_guard<std::mutex> lock(mtx);
    return messages;
  }
};

// Worker `rank` of a `world_size`-worker world on `port`, started again in
// its life 2.
std::unique_ptr<test::ChildWorker> second_life(int rank, int world_size, uint16_t port) {
  Incarnation second(2);
  return std::make_unique<test::ChildWorker>(rank, world_size, port);
}

std::unique_ptr<test::ChildWorker> second_life_of_worker2(uint16_t port) { return second_life(2, 3, port); }

uint64_t bulk_sent(Worker& w) { return castor::testing::runtime(w).stats.bulk_sent.load(); }

// What every rejoined worker2 must do: serve, call, be called through a
// third worker, own new RRefs and take large tensors on a new bulk link.
void check_rejoined(Worker& w0, int64_t old_pid) {
  auto pid = w0.rpc_sync<int64_t>("worker2", "pid_of");
  CHECK(pid != old_pid);
  CHECK(w0.rpc_sync<std::string>("worker2", "whoami") == "worker2");
  auto t = at::ones({3});
  // worker1 took it back too (RJ3, RJ4): calls between them both ways.
  CHECK(at::equal(w0.rpc_sync<at::Tensor>("worker1", "chain", std::vector<std::string>{"worker2"}, t), t + 2));
  CHECK(at::equal(w0.rpc_sync<at::Tensor>("worker2", "chain", std::vector<std::string>{"worker1"}, t), t + 2));
  // It calls us back while we wait on it.
  CHECK(w0.rpc_sync<int64_t>("worker2", "call_back", std::string("worker0"), int64_t(5)) == 12);
  // User code that throws there fails only its call.
  auto thrown = error_of([&] { w0.rpc_sync<int64_t>("worker2", "fail", std::string("thrown in life 2")); });
  CHECK_MESSAGE(contains(thrown, "thrown in life 2"), thrown);
  // RJ5: a large tensor on a new bulk link, not the old life's broken one.
  auto big = at::arange(1 << 20, at::kFloat);
  auto before = bulk_sent(w0);
  CHECK(at::equal(w0.rpc_sync<at::Tensor>("worker2", "identity", big), big));
  // The writer counts the frame after the receiver's answer wakes it, which
  // the call's reply can overtake.
  CHECK(eventually([&] { return bulk_sent(w0) == before + 1; }, std::chrono::milliseconds(10000)));
}

}  // namespace

TEST_CASE("a killed worker started again rejoins under incarnation 2: its old life stays dead, its new one serves") {
  auto port = test::free_port();
  test::ChildWorker c1(1, 3, port);
  test::ChildWorker c2(2, 3, port);
  auto w0 = init_rpc(test::local_options(0, 3, port));
  Heard heard;
  w0.on_worker_failure([&](const WorkerFailure& f) { heard.add(f); });
  auto old_pid = w0.rpc_sync<int64_t>("worker2", "pid_of");
  // Made by worker2 itself: its id comes from worker2's own counter.
  auto old_ref = w0.rpc_sync<RRef<at::Tensor>>("worker2", "make_remote", std::string("worker2"), at::ones({2}));
  CHECK(at::equal(old_ref.to_here(), at::ones({2})));
  c2.kill();
  CHECK(c2.wait_exit(milliseconds(10000)) == 128 + SIGKILL);
  REQUIRE(eventually([&] { return !w0.is_alive("worker2"); }));
  auto down = error_of([&] { w0.rpc_sync<std::string>("worker2", "whoami"); });
  CHECK_MESSAGE(contains(down, "worker2"), down);

  auto again = second_life_of_worker2(port);
  REQUIRE_MESSAGE(eventually([&] { return w0.is_alive("worker2"); }, milliseconds(30000)),
                  "worker2's second life did not rejoin within 30 s");
  check_rejoined(w0, old_pid);
  // RJ5: the old life's RRef stays dead; a new one gets an id the old life
  // never handed out (Note [Incarnation ids]).
  auto stale = error_of([&] { old_ref.to_here(); });
  CHECK_MESSAGE(contains(stale, "worker2"), stale);
  auto fresh = w0.rpc_sync<RRef<at::Tensor>>("worker2", "make_remote", std::string("worker2"), at::full({2}, 7.0));
  CHECK(at::equal(fresh.to_here(), at::full({2}, 7.0)));
  CHECK_MESSAGE(contains(stale, "incarnation 1 died, incarnation 2 rejoined"), stale);
  CHECK(castor::detail::incarnation_of(fresh.id()) == 2);
  CHECK(castor::detail::incarnation_of(old_ref.id()) == 1);
  CHECK(fresh.id() != old_ref.id());
  // The program ends with state live on the new life: it holds a fork of
  // ours, and we hold its RRef.
  auto mine = w0.make_rref(at::ones({4}));
  CHECK(w0.rpc_sync<bool>("worker2", "hold", std::string("ours"), mine));
  auto failures = heard.all();
  REQUIRE(failures.size() == 1);
  CHECK_MESSAGE(contains(failures[0], "connection lost"), failures[0]);
  // V4 of Note [Graceful shutdown]: everyone, the new life included, ends well.
  test::bounded(milliseconds(60000), "the shutdown after a rejoin", [&] { w0.shutdown(); });
  CHECK(c1.wait_exit(milliseconds(20000)) == 0);
  CHECK(again->wait_exit(milliseconds(20000)) == 0);
}

TEST_CASE("a new life replaces an old one the survivors still think alive (a frozen host): it is declared dead first") {
  auto port = test::free_port();
  test::ChildWorker c1(1, 3, port);
  test::ChildWorker c2(2, 3, port);
  auto w0 = init_rpc(test::local_options(0, 3, port));
  Heard heard;
  w0.on_worker_failure([&](const WorkerFailure& f) { heard.add(f); });
  auto old_pid = w0.rpc_sync<int64_t>("worker2", "pid_of");
  // Frozen: its sockets stay open, so nobody sees it die.
  REQUIRE_MESSAGE(c2.freeze(), "worker2 did not stop");
  // It will read this only when it wakes, in its dead life, and then call us.
  auto hanging = w0.rpc_async<int64_t>("worker2", "call_back", std::string("worker0"), int64_t(5));
  auto again = second_life_of_worker2(port);
  // RJ3: its pending call fails, naming the cause, once the new life checks in.
  auto why = error_of([&] { hanging.wait(milliseconds(30000)); });
  CHECK_MESSAGE(contains(why, "worker2"), why);
  REQUIRE(eventually([&] { return w0.is_alive("worker2") && heard.all().size() == 1; }, milliseconds(30000)));
  auto failures = heard.all();
  CHECK_MESSAGE(contains(failures[0], "replaced by its incarnation 2"), failures[0]);
  check_rejoined(w0, old_pid);
  // RJ6: the dead life wakes up and calls us: refused and counted, never run.
  auto refused_before = castor::testing::runtime(w0).stats.stale_refused.load();
  ::kill(pid_t(c2.pid()), SIGCONT);
  CHECK_MESSAGE(eventually([&] { return castor::testing::runtime(w0).stats.stale_refused.load() > refused_before; },
                           milliseconds(10000)),
                "nothing from the dead life was refused");
  c2.kill();
  CHECK(c2.wait_exit(milliseconds(10000)) == 128 + SIGKILL);
  // Its old connection's end comes late: it must not kill the new life.
  std::this_thread::sleep_for(milliseconds(300));
  CHECK(w0.is_alive("worker2"));
  CHECK(w0.rpc_sync<int64_t>("worker2", "pid_of") != old_pid);
  test::bounded(milliseconds(60000), "the shutdown after a replacing rejoin", [&] { w0.shutdown(); });
  CHECK(c1.wait_exit(milliseconds(20000)) == 0);
  CHECK(again->wait_exit(milliseconds(20000)) == 0);
}

TEST_CASE("a rejoin is refused with a clear error: a life the survivors know already, rank 0, a bad CASTOR_INCARNATION") {
  auto port = test::free_port();
  test::ChildWorker c1(1, 3, port);
  test::ChildWorker c2(2, 3, port);
  auto w0 = init_rpc(test::local_options(0, 3, port));
  // worker2's life 1 is alive: a second "life 1" is not newer, nor is it
  // allowed to replace it.
  {
    auto opts = test::local_options(2, 3, port);
    opts.incarnation = 1;
    opts.init_timeout = milliseconds(3000);
    auto joined = error_of([&] { init_rpc(opts); });
    CHECK_MESSAGE(!joined.empty(), "a second worker2 joined a complete world");
  }
  c2.kill();
  CHECK(c2.wait_exit(milliseconds(10000)) == 128 + SIGKILL);
  REQUIRE(eventually([&] { return !w0.is_alive("worker2"); }));
  {
    auto opts = test::local_options(2, 3, port);
    opts.incarnation = 3;
    auto w2 = init_rpc(opts);  // in this process: life 3 rejoins
    CHECK(w0.rpc_sync<std::string>("worker2", "whoami") == "worker2");
    // Life 2 comes too late: rank 0 knows life 3.
    auto stale_opts = test::local_options(2, 3, port);
    stale_opts.incarnation = 2;
    auto stale = error_of([&] { init_rpc(stale_opts); });
    CHECK_MESSAGE(contains(stale, "knows incarnation 3 of it; a rejoin needs a higher one"), stale);
    CHECK(w0.rpc_sync<std::string>("worker2", "whoami") == "worker2");
    auto rank0 = test::local_options(0, 2, test::free_port());
    rank0.incarnation = 2;
    auto refused0 = error_of([&] { init_rpc(rank0); });
    CHECK_MESSAGE(contains(refused0, "rank 0 cannot rejoin (incarnation 2)"), refused0);
    {
      Incarnation bad(0);
      auto junk = error_of([&] { init_rpc(test::local_options(1, 2, test::free_port())); });
      CHECK_MESSAGE(contains(junk, "CASTOR_INCARNATION must be a number from 1 to 256, not '0'"), junk);
    }
    std::thread other([&] { w2.shutdown(); });
    test::bounded(milliseconds(60000), "the shutdown after refused rejoins", [&] { w0.shutdown(); });
    other.join();
  }
  CHECK(c1.wait_exit(milliseconds(20000)) == 0);
}

TEST_CASE("two workers rejoining at once take each other back, and a late handler hears only deaths not undone") {
  auto port = test::free_port();
  test::ChildWorker c1(1, 4, port);
  test::ChildWorker c2(2, 4, port);
  test::ChildWorker c3(3, 4, port);
  auto w0 = init_rpc(test::local_options(0, 4, port));
  Heard heard;
  w0.on_worker_failure([&](const WorkerFailure& f) { heard.add(f); });
  // worker3 frozen: a rejoiner's check-in with it waits out its 10 s bound,
  // so worker2's new life is still rejoining when worker1's checks in with it.
  REQUIRE_MESSAGE(c3.freeze(), "worker3 did not stop");
  c1.kill();
  c2.kill();
  CHECK(c1.wait_exit(milliseconds(10000)) == 128 + SIGKILL);
  CHECK(c2.wait_exit(milliseconds(10000)) == 128 + SIGKILL);
  REQUIRE(eventually([&] { return !w0.is_alive("worker1") && !w0.is_alive("worker2"); }));
  auto b = second_life(2, 4, port);
  REQUIRE_MESSAGE(eventually([&] { return w0.is_alive("worker2"); }, milliseconds(30000)),
                  "worker2's second life did not check in with rank 0 within 30 s");
  auto a = second_life(1, 4, port);
  REQUIRE_MESSAGE(eventually([&] { return w0.is_alive("worker1"); }, milliseconds(30000)),
                  "worker1's second life did not check in with rank 0 within 30 s");
  // RJ9: each new life knows the other, both ways (a call to one still
  // rejoining waits for it to run).
  CHECK(w0.rpc_sync<int64_t>("worker1", "call_back", std::string("worker2"), int64_t(5), castor::Timeout{milliseconds(40000)}) == 12);
  CHECK(w0.rpc_sync<int64_t>("worker2", "call_back", std::string("worker1"), int64_t(5), castor::Timeout{milliseconds(40000)}) == 12);
  // F5 of Note [Failure handlers]: the two old lives' deaths were undone by
  // their rejoins; a handler registered now hears worker3's death alone.
  Heard late;
  w0.on_worker_failure([&](const WorkerFailure& f) { late.add(f); });
  c3.kill();
  CHECK(c3.wait_exit(milliseconds(10000)) == 128 + SIGKILL);
  REQUIRE(eventually([&] { return !late.all().empty(); }));
  std::this_thread::sleep_for(milliseconds(300));  // a replay would be dispatched at registration, long before
  auto told = late.all();
  CHECK(told.size() == 1);
  CHECK_MESSAGE(contains(told[0], "worker worker3 (rank 3) died"), told[0]);
  test::bounded(milliseconds(60000), "the shutdown after two rejoins at once", [&] { w0.shutdown(); });
  CHECK(a->wait_exit(milliseconds(20000)) == 0);
  CHECK(b->wait_exit(milliseconds(20000)) == 0);
}
