// Values made with castor::Restart come back when their owner does (Note
// [Restartable values] in rref/restart.hpp): the owner is SIGKILLed, started
// again as its next life, and every holder's RRef reaches the value made
// again there. Each worker is a real process (rank 0 is this one), on
// loopback TCP.
#include <doctest/doctest.h>

#include <signal.h>

#include <cstdlib>
#include <memory>
#include <string>

#include <ATen/ATen.h>

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

// Worker `rank` of a `world_size`-worker world on `port`, started as its
// life `life` (the launcher sets CASTOR_INCARNATION the same way).
std::unique_ptr<test::ChildWorker> life_of(int life, int rank, int world_size, uint16_t port) {
  ::setenv("CASTOR_INCARNATION", std::to_string(life).c_str(), 1);
  auto child = std::make_unique<test::ChildWorker>(rank, world_size, port);
  ::unsetenv("CASTOR_INCARNATION");
  return child;
}

// SIGKILLs `child` (worker2) and waits until rank 0 has seen it die.
void kill_worker2(Worker& w0, test::ChildWorker& child) {
  child.kill();
  CHECK(child.wait_exit(milliseconds(10000)) == 128 + SIGKILL);
  REQUIRE_MESSAGE(eventually([&] { return !w0.is_alive("worker2"); }, milliseconds(20000)),
                  "rank 0 did not see worker2 die within 20 s");
}

void wait_rejoined(Worker& w0) {
  REQUIRE_MESSAGE(eventually([&] { return w0.is_alive("worker2"); }, milliseconds(30000)),
                  "worker2's next life did not rejoin within 30 s");
}

int64_t owned_on(Worker& w0, const std::string& worker) { return w0.rpc_sync<int64_t>(worker, "rref_debug"); }

}  // namespace

TEST_CASE("a value made with castor::Restart comes back with its owner: every holder reaches it again") {
  auto port = test::free_port();
  test::ChildWorker c1(1, 3, port);
  auto c2 = std::make_unique<test::ChildWorker>(2, 3, port);
  auto w0 = init_rpc(test::local_options(0, 3, port));

  auto counter = w0.remote<Counter>("worker2", int64_t(10), Restart{2}, Timeout{milliseconds(20000)});
  CHECK(counter.rpc_sync<int64_t>("add", int64_t(5)) == 15);
  // worker1 holds a fork of it too, and uses it.
  CHECK(w0.rpc_sync<bool>("worker1", "hold_counter", std::string("c"), counter));
  CHECK(w0.rpc_sync<int64_t>("worker1", "add_to_held_counter", std::string("c"), int64_t(1)) == 16);
  auto sum = w0.remote<int64_t>("worker2", "add_ints", int64_t(2), int64_t(3), Restart{1});
  CHECK(sum.to_here() == 5);
  auto plain = w0.remote<Counter>("worker2", int64_t(1));
  CHECK(plain.rpc_sync<int64_t>("get") == 1);
  CHECK(owned_on(w0, "worker2") == 3);

  // Calls in flight at the death: "add" fails and is not run again;
  // "wait_at", registered idempotent (RS7), runs again on the next life.
  auto& gate = test::gate("restartable-in-flight");
  auto idempotent = counter.rpc_async<int64_t>("wait_at", std::string("worker0"), std::string("restartable-in-flight"));
  REQUIRE_MESSAGE(gate.wait_arrived(1, milliseconds(10000)), "the method call never reached worker2");
  auto in_flight = counter.rpc_async<int64_t>("add", int64_t(100));  // queued behind it on worker2
  kill_worker2(w0, *c2);
  auto lost = error_of<OwnerDiedError>([&] { in_flight.wait(); });
  CHECK_MESSAGE(contains(lost, "its owner, worker worker2, died"), lost);
  gate.open();
  // While the owner is dead, a use says a restart is to come; an
  // idempotent one waits for it (RS7).
  auto pending = error_of<OwnerDiedError>([&] { counter.rpc_sync<int64_t>("add", int64_t(1)); });
  CHECK_MESSAGE(contains(pending, "will be made again when it rejoins (restart 1 of 2)"), pending);
  auto waits = counter.rpc_async<int64_t>("get", Timeout{milliseconds(60000)});
  CHECK_FALSE(idempotent.is_done());

  auto again = life_of(2, 2, 3, port);
  wait_rejoined(w0);
  CHECK(idempotent.wait(milliseconds(30000)) == 1);
  // The constructor ran again on life 2 (neither "add" of life 1 counts);
  // every holder reaches that object.
  CHECK(waits.wait(milliseconds(30000)) == 10);
  CHECK(counter.rpc_sync<int64_t>("get") == 10);
  CHECK(counter.rpc_sync<int64_t>("add", int64_t(7)) == 17);
  CHECK(w0.rpc_sync<int64_t>("worker1", "add_to_held_counter", std::string("c"), int64_t(1)) == 18);
  CHECK(sum.to_here() == 5);
  // Without a policy the value stays dead (RJ5 of Note [Rejoin]).
  auto dead = error_of<OwnerDiedError>([&] { plain.rpc_sync<int64_t>("get"); });
  CHECK_MESSAGE(contains(dead, "incarnation 1 died, incarnation 2 rejoined without its values"), dead);
  // G1 holds again on the new life: two values made again, and the one
  // whose only holder lets go ends there.
  CHECK(owned_on(w0, "worker2") == 2);
  sum = RRef<int64_t>();
  CHECK_MESSAGE(eventually([&] { return owned_on(w0, "worker2") == 1; }, milliseconds(10000)),
                "the re-made value whose last holder let go did not end on worker2's new life");
  // The program ends with the re-made value still held by worker0 and worker1.
  test::bounded(milliseconds(60000), "the shutdown with a re-made value live", [&] { w0.shutdown(); });
  CHECK(c1.wait_exit(milliseconds(20000)) == 0);
  CHECK(again->wait_exit(milliseconds(20000)) == 0);
}

TEST_CASE("castor::Restart counts its restarts, fails uses with a recipe's error, and refuses what it cannot keep") {
  auto port = test::free_port();
  test::ChildWorker c1(1, 3, port);
  auto c2 = std::make_unique<test::ChildWorker>(2, 3, port);
  auto w0 = init_rpc(test::local_options(0, 3, port));

  // RS5: a recipe keeps no RRef (here a tensor for an RRef parameter), and
  // no more than 1 MiB of tensors.
  auto with_rref = error_of<std::invalid_argument>(
      [&] { w0.remote<at::Tensor>("worker1", "rref_sum", at::ones({2}), Restart{1}); });
  CHECK_MESSAGE(contains(with_rref, "an argument is an RRef"), with_rref);
  auto too_big = error_of<std::invalid_argument>(
      [&] { w0.remote<at::Tensor>("worker1", "identity", at::zeros({1 << 19}), Restart{1}); });
  CHECK_MESSAGE(contains(too_big, "more than the 1048576"), too_big);

  auto once = w0.remote<Counter>("worker2", int64_t(3), Restart{1});
  auto fragile = w0.remote<int64_t>("worker2", "first_life_only", int64_t(4), Restart{3});
  CHECK(once.rpc_sync<int64_t>("add", int64_t(1)) == 4);
  CHECK(fragile.to_here() == 4);

  kill_worker2(w0, *c2);
  auto second = life_of(2, 2, 3, port);
  wait_rejoined(w0);
  CHECK(once.rpc_sync<int64_t>("get") == 3);
  // The recipe throws on life 2 (user code): every use gets its cause.
  auto refused = error_of([&] { fragile.to_here(); });
  CHECK_MESSAGE(contains(refused, "first_life_only refuses life 2"), refused);

  kill_worker2(w0, *second);
  auto spent_while_dead = error_of<OwnerDiedError>([&] { once.rpc_sync<int64_t>("get"); });
  CHECK_MESSAGE(contains(spent_while_dead, "its 1 restart(s) are spent"), spent_while_dead);
  auto third = life_of(3, 2, 3, port);
  wait_rejoined(w0);
  auto spent = error_of<OwnerDiedError>([&] { once.rpc_sync<int64_t>("get"); });
  CHECK_MESSAGE(contains(spent, "rejoined as incarnation 3, but the value's 1 restart(s) are spent (castor::Restart{1})"),
                spent);
  // Life 3 serves the values whose restarts are left; only those (a use
  // waits for the holder's re-registration, RS1).
  auto refused_again = error_of([&] { fragile.to_here(); });
  CHECK_MESSAGE(contains(refused_again, "first_life_only refuses life 3"), refused_again);
  CHECK(owned_on(w0, "worker2") == 1);
  test::bounded(milliseconds(60000), "the shutdown after two restarts", [&] { w0.shutdown(); });
  CHECK(c1.wait_exit(milliseconds(20000)) == 0);
  CHECK(third->wait_exit(milliseconds(20000)) == 0);
}
