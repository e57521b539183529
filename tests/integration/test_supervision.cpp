// Supervision in the app's hands (issue 18, part 4): Worker::on_worker_failure
// and RRef/RemoteModule::on_owner_failure tell the app of a death exactly
// once (also when registered late), a handler that throws takes nothing
// down, and rank 0's graceful shutdown then ends among the survivors
// instead of failing (Note [Shutdown with survivors]). The dead worker is a
// real process killed with SIGKILL.
#include <doctest/doctest.h>

#include <signal.h>

#include <atomic>
#include <future>
#include <mutex>
#include <vector>

#include <ATen/ATen.h>

#include "actors/api/worker.hpp"
#include "rref/rref.hpp"
#include "support/cluster.hpp"
#include "support/errors.hpp"
#include "support/test_functions.hpp"

using namespace castor;
using castor::test::contains;
using castor::test::error_of;
using castor::test::eventually;
using std::chrono::milliseconds;

namespace {

// What handlers were told, from the executor's threads.
struct Seen {
  std::mutex mtx;
  std::vector<WorkerFailure> failures;
  void add(const WorkerFailure& f) {
    std::lock_guard<std::mutex> lock(mtx);
    failures.push_back(f);
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mtx);
    return failures.size();
  }
  WorkerFailure at(size_t i) {
    std::lock_guard<std::mutex> lock(mtx);
    return failures.at(i);
  }
};

}  // namespace

TEST_CASE("on_worker_failure: told once per death, also when registered late, and shutdown ends among the survivors") {
  auto port = test::free_port();
  test::ChildWorker child2(2, 3, port);
  // worker1 runs here too, so that its own handler can be read.
  auto starting1 = std::async(std::launch::async, [port] { return init_rpc(test::local_options(1, 3, port)); });
  auto w0 = init_rpc(test::local_options(0, 3, port));
  auto w1 = starting1.get();
  Seen seen, late, owner_seen, other_owner_seen, seen_by_1;
  auto before = std::chrono::system_clock::now();
  auto id = w0.on_worker_failure([&](const WorkerFailure& f) { seen.add(f); });
  std::atomic<int> thrown{0};
  w0.on_worker_failure([&](const WorkerFailure&) {
    ++thrown;
    throw std::runtime_error("a bug in the app's handler");  // reported on stderr, nothing else
  });
  CHECK_THROWS_AS(w0.on_worker_failure(WorkerFailureHandler{}), std::invalid_argument);
  // worker1 watches too: a handler on a rank other than 0.
  w1.on_worker_failure([&](const WorkerFailure& f) { seen_by_1.add(f); });
  auto on2 = w0.remote<at::Tensor>("worker2", "identity", at::ones({2}));
  auto on1 = w0.remote<at::Tensor>("worker1", "identity", at::ones({2}));
  CHECK(at::equal(on2.to_here(), at::ones({2})));
  on2.on_owner_failure([&](const WorkerFailure& f) { owner_seen.add(f); });
  on1.on_owner_failure([&](const WorkerFailure& f) { other_owner_seen.add(f); });
  auto waiting = w0.rpc_async<int64_t>("worker2", "sleep_ms", int64_t(60000));
  CHECK(w0.is_alive("worker2"));

  child2.kill();
  CHECK(contains(error_of<UnreachableError>([&] { waiting.wait(milliseconds(20000)); }),
                 "worker worker2 is unreachable"));
  REQUIRE(eventually([&] { return seen.size() == 1 && owner_seen.size() == 1 && thrown == 1; }, milliseconds(10000)));
  auto f = seen.at(0);
  CHECK(f.worker.name == "worker2");
  CHECK(f.worker.id == 2);
  CHECK(f.cause == "connection lost");
  CHECK(f.message() == "worker worker2 (rank 2) died: connection lost");
  CHECK(f.since >= before);
  CHECK(f.since <= std::chrono::system_clock::now());
  CHECK(owner_seen.at(0).worker.name == "worker2");
  CHECK_FALSE(w0.is_alive("worker2"));
  CHECK_FALSE(w0.is_alive(2));
  CHECK(w0.is_alive("worker1"));
  CHECK_THROWS_AS(w0.is_alive("worker9"), LookupError);
  // F1: a handler registered after the death is told of it too, once.
  w0.on_worker_failure([&](const WorkerFailure& g) { late.add(g); });
  REQUIRE(eventually([&] { return late.size() == 1; }, milliseconds(10000)));
  CHECK(late.at(0).worker.name == "worker2");
  // The survivors carry on: calls to worker1 work; its own handler heard.
  CHECK(w0.rpc_sync<int64_t>("worker1", "add_ints", int64_t(2), int64_t(3)) == 5);
  REQUIRE(eventually([&] { return seen_by_1.size() == 1; }, milliseconds(10000)));
  CHECK(seen_by_1.at(0).message() == "worker worker2 (rank 2) died: connection lost");
  CHECK(contains(error_of<OwnerDiedError>([&] { on2.to_here(); }), "worker2"));
  CHECK(w0.remove_failure_handler(id));
  CHECK_FALSE(w0.remove_failure_handler(id));
  // Note [Shutdown with survivors]: rank 0 took the death in charge, so the
  // graceful shutdown of the two left succeeds.
  auto stopping1 = std::async(std::launch::async, [&] { w1.shutdown(); });
  w0.shutdown();
  REQUIRE(stopping1.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  CHECK_NOTHROW(stopping1.get());
  CHECK(child2.wait_exit(milliseconds(10000)) == 128 + SIGKILL);
  // Nothing more was reported: worker1 leaving at the end is no death (F4),
  // and its own RRef's owner never died.
  CHECK(seen.size() == 1);
  CHECK(seen_by_1.size() == 1);
  CHECK(late.size() == 1);
  CHECK(thrown == 1);
  CHECK(other_owner_seen.size() == 0);
}

TEST_CASE("a death during the shutdown waves: rank 0, in charge of it, ends the shutdown with the survivors") {
  auto port = test::free_port();
  test::ChildWorker child1(1, 3, port), child2(2, 3, port);
  auto w0 = init_rpc(test::local_options(0, 3, port));
  Seen seen;
  w0.on_worker_failure([&](const WorkerFailure& f) { seen.add(f); });
  // A call that keeps rank 0 busy, so the waves cannot end before the kill.
  auto waiting = w0.rpc_async<int64_t>("worker2", "sleep_ms", int64_t(60000));
  auto shutting = std::async(std::launch::async, [&] { w0.shutdown(); });
  CHECK(shutting.wait_for(std::chrono::milliseconds(800)) == std::future_status::timeout);  // waiting on worker2
  child2.kill();
  REQUIRE(shutting.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  CHECK_NOTHROW(shutting.get());
  CHECK(contains(error_of<UnreachableError>([&] { waiting.wait(milliseconds(1000)); }), "worker2"));
  CHECK(seen.size() == 1);
  CHECK(child1.wait_exit(milliseconds(20000)) == 0);
}

TEST_CASE("without a failure handler, a death still fails rank 0's graceful shutdown, naming the dead worker") {
  auto port = test::free_port();
  test::ChildWorker child1(1, 3, port), child2(2, 3, port);
  auto w0 = init_rpc(test::local_options(0, 3, port));
  CHECK(w0.rpc_sync<int64_t>("worker2", "add_ints", int64_t(1), int64_t(1)) == 2);
  child2.kill();
  CHECK(eventually([&] { return !w0.is_alive("worker2"); }, milliseconds(10000)));
  CHECK(contains(error_of<UnreachableError>([&] { w0.shutdown(); }),
                 "graceful shutdown of worker0 failed: worker worker2 is unreachable"));
  // worker1 loses rank 0 and fails its own shutdown: it exits, not hangs.
  CHECK(child1.wait_exit(milliseconds(20000)) >= 0);
}
