// Note [RRef protocol] without actors: every rule, as kept by the plain
// classes of rref/protocol/, driven through the simulated network of
// rref_sim.hpp (delays, reordering, duplicates, drops, dead workers), plus
// the classes on their own where a rule is local to one of them.
#include <doctest/doctest.h>

#include <chrono>
#include <random>

#include "rref/protocol/fork_table.hpp"
#include "rref/protocol/outbox.hpp"
#include "rref/protocol/owner_directory.hpp"
#include "rref/protocol/owner_forks.hpp"
#include "rref_sim.hpp"

using namespace castor;
using namespace castor::detail;
using castor::test::rref_sim::Faults;
using castor::test::rref_sim::Handle;
using castor::test::rref_sim::Rule;
using castor::test::rref_sim::Sim;
using std::chrono::milliseconds;

namespace {

// Every break of the protocol's promises the simulation saw, one per line.
std::string violations_of(const Sim& sim) {
  std::string out;
  for (auto& v : sim.violations()) out += v + "\n";
  return out;
}

void check_clean_end(Sim& sim) {
  CHECK(sim.run_until_quiet());
  CHECK_MESSAGE(sim.all_clear(), sim.leftovers());
  CHECK_MESSAGE(sim.violations().empty(), violations_of(sim));
}

Outbox::time_point at_ms(int64_t ms) { return Outbox::time_point{} + milliseconds(ms); }

}  // namespace

// -- the classes on their own --------------------------------------------------------------

TEST_CASE("outbox: resent after 50 ms, each wait doubling up to 2 s, until acknowledged") {
  TableGauge gauge;
  Outbox outbox(3, gauge);
  auto first = outbox.post(ControlToSend{1, RRefOp::user_delete, RRefId(1, 1), ForkId(3, 1)}, at_ms(0));
  CHECK(first.to == 1);
  CHECK(first.msg.id.worker() == 3);
  CHECK(first.msg.holder == 3);
  CHECK(gauge.load() == 1);
  std::vector<int64_t> resends;
  for (int64_t t = 0; t <= 12000; t += 25)
    if (!outbox.due(at_ms(t)).empty()) resends.push_back(t);
  std::vector<int64_t> expected{50, 150, 350, 750, 1550, 3150, 5150, 7150, 9150, 11150};
  CHECK(resends == expected);
  auto acked = outbox.acknowledge(first.msg.id);
  REQUIRE(acked);
  CHECK(acked->op == RRefOp::user_delete);
  CHECK_FALSE(outbox.acknowledge(first.msg.id));  // a repeated ack
  CHECK(outbox.empty());
  CHECK(gauge.load() == 0);
  CHECK(outbox.due(at_ms(20000)).empty());
}

TEST_CASE("outbox: what was meant for a dead peer is dropped, the rest kept, ids are unique") {
  TableGauge gauge;
  Outbox outbox(0, gauge);
  auto a = outbox.post(ControlToSend{1, RRefOp::user_delete, RRefId(1, 1), ForkId(0, 1)}, at_ms(0));
  auto b = outbox.post(ControlToSend{2, RRefOp::fork_request, RRefId(2, 1), ForkId(1, 1)}, at_ms(0));
  auto c = outbox.post(ControlToSend{1, RRefOp::child_accept, RRefId(1, 2), ForkId(1, 2)}, at_ms(0));
  CHECK(a.msg.id != b.msg.id);
  CHECK(b.msg.id != c.msg.id);
  outbox.peer_down(1);
  CHECK(outbox.size() == 1);
  CHECK(gauge.load() == 1);
  auto due = outbox.due(at_ms(50));
  REQUIRE(due.size() == 1);
  CHECK(due[0].to == 2);
  CHECK_FALSE(outbox.acknowledge(a.msg.id));
}

TEST_CASE("owner forks: idempotent adds and deletes, a delete before its add, local refs, creation") {
  TableGauge worker, value;
  OwnerForks o(/*creator=*/1, worker, value);
  CHECK_FALSE(o.may_end());  // not created yet: nothing may end it
  o.apply(OwnerEvent::local_ref(RRefId(1, 1), +1, false));
  o.apply(OwnerEvent::created(RRefId(1, 1), ForkId(1, 9), 1));  // remote(): the caller's fork
  CHECK(o.has_fork(ForkId(1, 9)));
  o.add_fork(ForkId(2, 1), 2);
  o.add_fork(ForkId(2, 1), 2);  // repeated
  CHECK(o.forks() == 2);
  CHECK(worker.load() == 2);
  CHECK(value.load() == 2);
  o.del_fork(ForkId(3, 1));     // its delete overtook its add
  o.add_fork(ForkId(3, 1), 3);  // ignored: cancelled
  CHECK(o.forks() == 2);
  o.del_fork(ForkId(2, 1));
  o.del_fork(ForkId(2, 1));     // repeated
  o.add_fork(ForkId(2, 1), 2);  // late repeat of the add
  CHECK(o.forks() == 1);
  o.del_fork(ForkId(1, 9));
  CHECK_FALSE(o.may_end());  // the local handle
  o.local_ref(-1);
  CHECK(o.may_end());
  CHECK(worker.load() == 0);
  CHECK(value.load() == 0);
}

TEST_CASE("owner forks: a dead worker's forks count as deleted, a dead creator ends the wait for creation") {
  TableGauge worker, value;
  OwnerForks o(/*creator=*/2, worker, value);
  o.add_fork(ForkId(1, 1), 1);
  o.add_fork(ForkId(3, 1), 3);
  CHECK(o.peer_down(1) == OwnerForks::Outcome::none);
  CHECK(o.forks() == 1);
  o.add_fork(ForkId(1, 1), 1);  // a late add from the dead worker
  CHECK(o.forks() == 1);
  CHECK(o.peer_down(2) == OwnerForks::Outcome::creator_died);
  CHECK(o.is_created());
  CHECK(o.peer_down(2) == OwnerForks::Outcome::none);  // once
  o.del_fork(ForkId(3, 1));
  CHECK(o.may_end());
}

TEST_CASE("owner directory: an ended owner is not made again while its tombstone lasts, tombstones are bounded") {
  OwnerDirectory<int> d;
  int made = 0;
  auto make = [&] { return ++made; };
  auto t0 = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  REQUIRE(d.find_or_make(RRefId(0, 1), make));
  CHECK(d.find_or_make(RRefId(0, 1), make) == d.find(RRefId(0, 1)));
  CHECK(made == 1);
  d.ended(RRefId(0, 1), t0);
  CHECK_FALSE(d.find_or_make(RRefId(0, 1), make));
  CHECK(made == 1);
  CHECK(d.size() == 0);
  // A long job ends many values: tombstones older than the grace go, the
  // young ones stay, so the directory holds what a late copy could still name.
  for (uint64_t i = 2; i <= 1000; ++i) d.ended(RRefId(0, i), t0 + std::chrono::milliseconds(100 * i));
  CHECK(d.tombstones() == 1000);
  auto later = t0 + OwnerDirectory<int>::kTombstoneGrace + std::chrono::seconds(50);
  d.ended(RRefId(1, 1), later);
  CHECK(d.tombstones() == 1001 - 499);  // ids 1..499 ended more than the grace before
  CHECK_FALSE(d.has_ended(RRefId(0, 499)));
  CHECK(d.has_ended(RRefId(0, 501)));
  CHECK_FALSE(d.find_or_make(RRefId(0, 501), make));
  CHECK(made == 1);
}

TEST_CASE("fork table: the sharing cases as the receiver sees them") {
  TableGauge users, children;
  ForkTable t(/*self=*/1, users, children);
  CHECK(t.arrival_of(RRefForkData{1, RRefId(1, 1), ForkId(2, 1), 2, ""}) == Arrival::at_owner);
  CHECK(t.arrival_of(RRefForkData{0, RRefId(0, 1), ForkId(0, 1), 0, ""}) == Arrival::from_owner);
  CHECK(t.arrival_of(RRefForkData{0, RRefId(0, 1), ForkId(2, 1), 2, ""}) == Arrival::from_user);
  auto at_owner = t.arrived_at_owner(RRefForkData{1, RRefId(1, 1), ForkId(2, 1), 2, ""});
  CHECK(at_owner.local_ref.delta == 1);
  REQUIRE(at_owner.release_parent);
  CHECK(at_owner.release_parent->to == 2);
  CHECK(at_owner.release_parent->op == RRefOp::child_accept);
  CHECK_FALSE(t.arrived_at_owner(RRefForkData{1, RRefId(1, 1), ForkId(1, 5), 1, ""}).release_parent);
}

TEST_CASE("fork table: a pending user is confirmed once, releases its waiting calls and tells its parent") {
  TableGauge users, children;
  ForkTable t(/*self=*/2, users, children);
  auto s = std::make_shared<RRefState>();
  s->id = RRefId(0, 1);
  s->owner = 0;
  s->fork = ForkId(1, 1);
  auto request = t.arrived_from_user(s, /*parent=*/1, /*waiting=*/7).fork_request;
  REQUIRE(request);
  CHECK(request->to == 0);
  CHECK(request->op == RRefOp::fork_request);
  CHECK_FALSE(t.arrived_from_user(s, 1, 8).fork_request);  // the same fork again: no second request
  CHECK(users.load() == 1);
  RRefControl acked{ControlId(2, 1), RRefOp::fork_request, s->id, s->fork, 2};
  auto confirmed = t.acknowledged(acked);
  REQUIRE(confirmed);
  CHECK(s->confirmed.load());
  CHECK(confirmed->release_parent.to == 1);
  CHECK(confirmed->release_parent.op == RRefOp::child_accept);
  CHECK(confirmed->calls == std::vector<PreparedCallId>{7, 8});
  CHECK_FALSE(t.acknowledged(acked));  // a repeated ack
  CHECK(users.load() == 0);
}

TEST_CASE("fork table: after its owner's peer_down, a fork from a user fails its call at once and nothing waits") {
  // Found by the random simulation with deaths: the fork_request for a dead
  // owner is never sent, so a pending user made now would wait forever.
  TableGauge users, children;
  ForkTable t(/*self=*/2, users, children);
  CHECK(t.peer_down(0).empty());
  auto s = std::make_shared<RRefState>();
  s->id = RRefId(0, 1);
  s->owner = 0;
  s->fork = ForkId(1, 1);
  auto arrived = t.arrived_from_user(s, /*parent=*/1, /*waiting=*/7);
  CHECK(arrived.owner_dead);
  CHECK_FALSE(arrived.fork_request);
  CHECK(users.load() == 0);
  CHECK_FALSE(t.is_pending_user(s->fork));
  // A fork this worker gives to a dead worker, or of a dead owner's value,
  // is not kept as a pending child (no peer_down would release it).
  auto mine = std::make_shared<RRefState>();
  mine->id = RRefId(3, 1);
  mine->owner = 3;
  mine->fork = ForkId(2, 4);
  CHECK(t.peer_down(1).empty());
  CHECK_FALSE(t.fork_registered(mine, ForkId(2, 5), /*to=*/1));
  CHECK_FALSE(t.fork_registered(s, ForkId(2, 6), /*to=*/3));
  CHECK(children.load() == 0);
  // A late fork_request from a dead worker is not counted at an owner.
  CHECK_FALSE(t.control_received(RRefControl{ControlId(1, 9), RRefOp::fork_request, RRefId(2, 1), ForkId(1, 9), 1}));
}

// -- G1 ---------------------------------------------------------------------------------------

TEST_CASE("G1: the owner learns of every deleted fork, the value ends when the last fork and local handle go, never "
          "before") {
  Sim sim(4, /*seed=*/11, Faults{0.3, 0.3, 1, 40});
  auto h = sim.make_rref(0);
  std::vector<Handle> users{sim.share(h, 1), sim.share(h, 2), sim.share(h, 3)};
  CHECK(sim.run_until_quiet());
  REQUIRE(sim.owner_forks(h));
  CHECK(sim.owner_forks(h)->forks() == 3);
  // The users go first, one by one: the owner's count follows.
  for (size_t i = 0; i < users.size(); ++i) {
    sim.drop(users[i]);
    CHECK(sim.run_until_quiet());
    REQUIRE(sim.owner_forks(h));
    CHECK(sim.owner_forks(h)->forks() == users.size() - i - 1);
  }
  CHECK_FALSE(sim.ended(h));  // the owner's own handle is still there
  sim.drop(h);
  check_clean_end(sim);
  CHECK(sim.ended(h));
  CHECK(sim.stats().dropped > 0);  // the faults happened
  CHECK(sim.stats().resent > 0);
}

TEST_CASE("G1: the owner's handle goes first, then the users, the value ends with the last of them") {
  Sim sim(3, /*seed=*/12, Faults{0.2, 0.2, 1, 30});
  auto h = sim.make_rref(0);
  auto a = sim.share(h, 1);
  auto b = sim.share(h, 2);
  sim.drop(h);
  CHECK(sim.run_until_quiet());
  CHECK_FALSE(sim.ended(h));
  sim.drop(a);
  CHECK(sim.run_until_quiet());
  CHECK_FALSE(sim.ended(h));
  sim.drop(b);
  check_clean_end(sim);
  CHECK(sim.ended(h));
}

// -- the four sharing cases ------------------------------------------------------------------------

TEST_CASE("owner -> user: the owner counts the fork before it leaves, so dropping its own handle at once is safe") {
  Sim sim(2, /*seed=*/21, Faults{0, 0, 20, 60});
  auto h = sim.make_rref(0);
  auto u = sim.share(h, 1);
  sim.drop(h);  // while the fork is on its way
  CHECK(sim.run_until_quiet());
  CHECK(sim.ran(u));
  CHECK(sim.confirmed_when_ran(u));  // confirmed on arrival
  CHECK_FALSE(sim.ended(h));
  sim.drop(u);
  check_clean_end(sim);
  CHECK(sim.ended(h));
}

TEST_CASE("user -> owner: the parent keeps its fork until the owner's child_accept, the owner uses its own handle") {
  Sim sim(2, /*seed=*/22, Faults{0, 0, 1, 10});
  sim.add_rule(Rule{"call", 0, 100});  // the fork travels slowly back to the owner
  auto h = sim.make_rref(0);
  auto u = sim.share(h, 1);
  CHECK(sim.run_until_quiet());
  auto back = sim.share(u, 0);
  sim.drop(u);  // the parent lets go while its child is on the way: G2 keeps its fork
  sim.drop(h);  // and so does the owner's own handle
  sim.run_for(50);
  CHECK(sim.forks_of(1).pending_children() == 1);
  CHECK_FALSE(sim.ended(h));
  CHECK(sim.run_until_quiet());
  CHECK(sim.ran(back));
  CHECK(sim.forks_of(1).pending_children() == 0);  // child_accept released it
  CHECK_FALSE(sim.ended(h));
  REQUIRE(sim.owner_forks(h));
  CHECK(sim.owner_forks(h)->forks() == 0);  // the owner does not count its own fork
  CHECK(sim.owner_forks(h)->local_refs() == 1);
  sim.drop(back);
  check_clean_end(sim);
  CHECK(sim.ended(h));
}

TEST_CASE("user -> user: the child's call runs only after the owner's ack, the parent waits for child_accept (G2)") {
  Sim sim(3, /*seed=*/23, Faults{0, 0, 1, 5});
  sim.add_rule(Rule{"fork_request", 0, 200});  // the owner hears of the child late
  auto h = sim.make_rref(0);
  auto a = sim.share(h, 1);
  CHECK(sim.run_until_quiet());
  sim.drop(h);
  auto b = sim.share(a, 2);
  sim.drop(a);  // the parent lets go at once
  sim.run_for(100);
  CHECK_FALSE(sim.ran(b));  // waiting for the owner's confirmation
  CHECK(sim.forks_of(2).pending_users() == 1);
  CHECK(sim.forks_of(1).pending_children() == 1);  // G2: the parent's fork still counts at the owner
  REQUIRE(sim.owner_forks(h));
  CHECK(sim.owner_forks(h)->forks() == 1);
  CHECK(sim.run_until_quiet());
  CHECK(sim.ran(b));
  CHECK(sim.confirmed_when_ran(b));
  CHECK_FALSE(sim.ended(h));
  sim.drop(b);
  check_clean_end(sim);
  CHECK(sim.ended(h));
}

TEST_CASE("G2: a parent's fork outlives its unconfirmed child through every drop order") {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    CAPTURE(seed);
    Sim sim(4, seed, Faults{0.1, 0.1, 1, 80});
    auto h = sim.make_rref(0);
    auto a = sim.share(h, 1);
    sim.run_until_arrived(a);
    sim.drop(h);
    auto b = sim.share(a, 2);
    auto c = sim.share(a, 3);
    sim.drop(a);
    sim.run_until_arrived(b);
    auto d = sim.share(b, 3);  // maybe before b's own confirmation, as from a reply
    sim.drop(b);
    sim.run_until_quiet();
    CHECK(sim.ran(c));
    CHECK(sim.ran(d));
    CHECK_FALSE(sim.ended(h));
    sim.drop(c);
    sim.run_until_quiet();
    CHECK_FALSE(sim.ended(h));
    sim.drop(d);
    check_clean_end(sim);
    CHECK(sim.ended(h));
  }
}

TEST_CASE("remote(): the owner counts the caller's fork with the creation") {
  Sim sim(3, /*seed=*/24, Faults{0, 0, 1, 20});
  auto h = sim.remote(1, 0);
  CHECK(sim.run_until_quiet());
  REQUIRE(sim.owner_forks(h));
  CHECK(sim.owner_forks(h)->is_created());
  CHECK(sim.owner_forks(h)->forks() == 1);
  auto u = sim.share(h, 2);  // the result shared on, user -> user
  CHECK(sim.run_until_quiet());
  CHECK(sim.ran(u));
  sim.drop(h);
  CHECK(sim.run_until_quiet());
  CHECK_FALSE(sim.ended(h));
  sim.drop(u);
  check_clean_end(sim);
  CHECK(sim.ended(h));
}

TEST_CASE("remote(): the caller's delete overtakes the creating request, the value ends once created") {
  Sim sim(2, /*seed=*/25, Faults{0, 0, 1, 5});
  sim.add_rule(Rule{"create", 0, 300});  // the request is slow
  auto h = sim.remote(1, 0);
  sim.drop(h);  // user_delete reaches the owner first
  sim.run_for(100);
  REQUIRE(sim.owner_forks(h));  // made by the delete, waiting for the creation
  CHECK_FALSE(sim.owner_forks(h)->is_created());
  check_clean_end(sim);
  CHECK(sim.ended(h));  // and never made again by a late message
}

TEST_CASE("remote(): a fork shared before the creating request arrives keeps the value") {
  Sim sim(3, /*seed=*/26, Faults{0, 0, 1, 5});
  sim.add_rule(Rule{"create", 0, 300});  // the creator's request is slow
  auto h = sim.remote(1, 0);
  auto u = sim.share(h, 2);  // user -> user: its fork_request makes the owner
  sim.drop(h);
  sim.run_for(150);
  CHECK(sim.ran(u));
  REQUIRE(sim.owner_forks(u));
  CHECK_FALSE(sim.owner_forks(u)->is_created());
  CHECK(sim.owner_forks(u)->forks() == 1);
  CHECK(sim.run_until_quiet());
  CHECK(sim.owner_forks(u)->is_created());
  CHECK_FALSE(sim.ended(h));
  sim.drop(u);
  check_clean_end(sim);
  CHECK(sim.ended(h));
}

// -- duplicates, reordering, lost acks ------------------------------------------------------------

TEST_CASE("duplicates are ignored: every control message and ack three times, the late copies last") {
  Sim sim(3, /*seed=*/31, Faults{0, 0, 1, 5});
  sim.add_rule(Rule{"*", 0, 0, 3, 150});  // copies 150 ms and 300 ms after the first
  auto h = sim.make_rref(0);
  auto a = sim.share(h, 1);
  sim.run_until_arrived(a);
  auto b = sim.share(a, 2);
  sim.drop(a);
  sim.run_for(60);
  CHECK(sim.ran(b));
  sim.drop(b);  // its user_delete arrives before the fork_request's late copies
  sim.run_for(400);
  REQUIRE(sim.owner_forks(h));
  CHECK(sim.owner_forks(h)->forks() == 0);  // no late copy revived a fork
  CHECK(sim.forks_of(1).pending_children() == 0);
  sim.drop(h);
  check_clean_end(sim);
  CHECK(sim.ended(h));
  CHECK(sim.stats().duplicated > 0);
}

TEST_CASE("late copies never revive a value that ended") {
  Sim sim(3, /*seed=*/33, Faults{0, 0, 1, 5});
  sim.add_rule(Rule{"*", 0, 0, 3, 150});
  auto h = sim.make_rref(0);
  auto a = sim.share(h, 1);
  sim.run_until_arrived(a);
  auto b = sim.share(a, 2);
  sim.drop(a);
  sim.drop(h);
  sim.run_for(60);
  CHECK(sim.ran(b));
  sim.drop(b);
  sim.run_for(100);
  CHECK(sim.ended(h));  // before the late copies of fork_request and user_delete arrive
  check_clean_end(sim);
}

TEST_CASE("lost messages and acks are resent until acknowledged") {
  Sim sim(3, /*seed=*/32, Faults{0, 0, 1, 5});
  sim.add_rule(Rule{"ack", 4});  // the first four acks are lost
  sim.add_rule(Rule{"fork_request", 2});
  sim.add_rule(Rule{"child_accept", 2});
  sim.add_rule(Rule{"user_delete", 2});
  auto h = sim.make_rref(0);
  auto a = sim.share(h, 1);
  sim.run_until_quiet();
  auto b = sim.share(a, 2);
  sim.drop(a);
  sim.drop(h);
  CHECK(sim.run_until_quiet());
  CHECK(sim.ran(b));
  sim.drop(b);
  check_clean_end(sim);
  CHECK(sim.ended(h));
  CHECK(sim.stats().resent >= 4);
}

TEST_CASE("reordering: child_accept, user_delete and fork_request in every order over many seeds") {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    Sim sim(4, seed, Faults{0, 0, 1, 200});  // wide random delays: heavy reordering
    auto w = [&](int i) { return WorkerId((seed + uint64_t(i)) % 4); };
    auto h = sim.make_rref(w(0));
    auto a = sim.share(h, w(1));
    sim.drop(h);
    sim.run_until_arrived(a);
    auto b = sim.share(a, w(2));
    sim.drop(a);
    sim.run_until_arrived(b);
    auto c = sim.share(b, w(3));  // b maybe unconfirmed still
    sim.drop(b);
    sim.run_until_quiet();
    CHECK(sim.ran(c));
    CHECK_FALSE(sim.ended(h));
    sim.drop(c);
    check_clean_end(sim);
    CHECK(sim.ended(h));
  }
}

// -- dead peers -----------------------------------------------------------------------------------

TEST_CASE("a dead worker's forks count as deleted") {
  Sim sim(3, /*seed=*/41, Faults{0, 0, 1, 5});
  auto h = sim.make_rref(0);
  auto a = sim.share(h, 1);
  auto b = sim.share(h, 2);
  sim.run_until_quiet();
  sim.drop(h);
  sim.drop(b);
  sim.kill(1);  // holds `a` and will never delete it
  check_clean_end(sim);
  CHECK(sim.ended(h));
  (void)a;
}

TEST_CASE("pending children given to a dead worker are dropped, so the parent's fork can go") {
  Sim sim(3, /*seed=*/42, Faults{0, 0, 1, 5});
  sim.add_rule(Rule{"call", 0, 100, 1, 0, /*from=*/1});  // the child never gets it before dying
  auto h = sim.make_rref(0);
  auto a = sim.share(h, 1);
  sim.run_until_quiet();
  auto b = sim.share(a, 2);
  sim.drop(a);
  sim.kill(2);
  sim.run_for(50);
  CHECK(sim.forks_of(1).pending_children() == 0);
  sim.drop(h);
  check_clean_end(sim);
  CHECK(sim.ended(h));
  CHECK_FALSE(sim.ran(b));
}

TEST_CASE("control messages for a dead peer leave the outbox") {
  Sim sim(2, /*seed=*/43, Faults{0, 0, 1, 5});
  sim.add_rule(Rule{"ack", 1000, 0, 1, 0, /*from=*/0});  // the owner's acks never arrive
  auto h = sim.make_rref(0);
  auto a = sim.share(h, 1);
  sim.run_until_quiet(500);
  sim.drop(a);
  sim.run_for(500);
  CHECK(sim.outbox_of(1).size() == 1);  // user_delete, resent again and again
  CHECK(sim.counters_of(1).outbox.load() == 1);
  sim.kill(0);
  check_clean_end(sim);
  CHECK(sim.outbox_of(1).empty());
  CHECK(sim.counters_of(1).outbox.load() == 0);
}

TEST_CASE("a pending user whose owner died fails the call that waited for it") {
  Sim sim(3, /*seed=*/44, Faults{0, 0, 1, 5});
  sim.add_rule(Rule{"ack", 1000, 0, 1, 0, /*from=*/0});  // the owner never confirms
  auto h = sim.make_rref(0);
  auto a = sim.share(h, 1);
  sim.run_for(100);
  auto b = sim.share(a, 2);
  sim.run_for(200);
  CHECK_FALSE(sim.ran(b));
  CHECK(sim.forks_of(2).pending_users() == 1);
  CHECK(sim.forks_of(1).pending_children() == 1);
  sim.kill(0);
  check_clean_end(sim);
  CHECK(sim.failed(b));
  CHECK_FALSE(sim.ran(b));
  // The parent's pending child went too: its owner is gone, nothing is left to protect.
  CHECK(sim.forks_of(1).pending_children() == 0);
  (void)h;
}

TEST_CASE("a creator that dies before its request arrives: the owner stops waiting and ends with its last fork") {
  Sim sim(3, /*seed=*/45, Faults{0, 0, 1, 5});
  sim.add_rule(Rule{"create", 0, 10000, 1, 0, /*from=*/1});  // the request is lost with its sender
  auto h = sim.remote(1, 0);
  auto u = sim.share(h, 2);
  sim.run_for(200);
  REQUIRE(sim.owner_forks(u));  // made by u's fork_request
  CHECK_FALSE(sim.owner_forks(u)->is_created());
  sim.kill(1);
  sim.run_for(100);
  CHECK(sim.creator_died(u));
  CHECK_FALSE(sim.ended(u));  // u's fork still counts
  sim.drop(u);
  check_clean_end(sim);
  CHECK(sim.ended(u));
}

TEST_CASE("G3: a fork taken by value is borrowed: fetched under the parent's pending child, never counted") {
  // The pipeline's pattern: worker0 makes a value on worker1 with remote(),
  // passes it to worker2's function that takes the value, and lets go at once.
  Sim sim(3, /*seed=*/61, Faults{0, 0, 1, 5});
  sim.add_rule(Rule{"create", 0, 200});        // the borrower's fetch overtakes the creation
  sim.add_rule(Rule{"child_accept", 0, 150});  // and the parent hears of the borrow's end late
  auto h = sim.remote(0, 1);
  auto b = sim.borrow(h, 2);
  sim.drop(h);
  sim.run_for(100);
  CHECK_FALSE(sim.ran(b));                         // the value is not made yet
  CHECK(sim.forks_of(0).pending_children() == 1);  // G2 keeps worker0's fork
  CHECK(sim.forks_of(2).pending_users() == 0);     // the borrower asked the owner for nothing but the value
  sim.run_for(200);
  CHECK(sim.ran(b));
  CHECK_FALSE(sim.holds(b));  // the function had the value; no fork was kept
  CHECK_FALSE(sim.ended(h));  // child_accept not arrived yet: worker0's fork still counts
  check_clean_end(sim);
  CHECK(sim.ended(h));
  CHECK(sim.sent_of("fork_request") == 0);
  CHECK(sim.sent_of("child_accept") >= 1);  // resent while the rule holds it back
  CHECK(sim.sent_of("user_delete") == 1);  // worker0's only
  CHECK(sim.sent_of("fetch") == 1);
}

TEST_CASE("G3: an owner's fork, or a fork to the owner, taken by value is adopted as before") {
  Sim sim(3, /*seed=*/62, Faults{0, 0, 1, 5});
  auto h = sim.make_rref(0);
  auto u = sim.borrow(h, 1);  // owner -> user: counted by the owner, nothing to borrow
  sim.run_until_arrived(u);
  CHECK(sim.holds(u));
  auto back = sim.borrow(u, 0);  // user -> owner: the owner's own handle
  CHECK(sim.run_until_quiet());
  CHECK(sim.holds(back));
  CHECK(sim.sent_of("fetch") == 0);
  sim.drop(h);
  sim.drop(u);
  sim.drop(back);
  check_clean_end(sim);
  CHECK(sim.ended(h));
}

TEST_CASE("G3: the parent dies while a borrow's fetch is out: the fetch fails or gets the value, nothing is left") {
  for (int delay : {0, 30, 120}) {
    CAPTURE(delay);
    Sim sim(3, /*seed=*/63 + uint64_t(delay), Faults{0, 0, 1, 5});
    sim.add_rule(Rule{"fetch", 0, delay});
    auto h = sim.remote(0, 1);
    CHECK(sim.run_until_quiet());
    auto b = sim.borrow(h, 2);
    sim.drop(h);
    sim.run_for(3);
    sim.kill(0);
    check_clean_end(sim);
    CHECK((sim.ran(b) || sim.failed(b)));
    CHECK(sim.ended(h));
  }
}

TEST_CASE("G3: the owner dies while a borrow's fetch is out: the call fails and the parent's pending child goes") {
  Sim sim(3, /*seed=*/64, Faults{0, 0, 1, 5});
  sim.add_rule(Rule{"fetch", 0, 500});  // lost with the owner
  auto h = sim.remote(0, 1);
  CHECK(sim.run_until_quiet());
  auto b = sim.borrow(h, 2);
  sim.run_for(50);
  sim.kill(1);
  sim.run_for(100);
  CHECK(sim.failed(b));
  CHECK(sim.forks_of(0).pending_children() == 0);
  sim.drop(h);
  check_clean_end(sim);
}

// -- randomized ------------------------------------------------------------------------------------

namespace {

// A random program over `n` workers: values made (make_rref or remote()),
// shared along random trees (some passes borrowed by a function that takes
// the value, G3), dropped in random order, while the network
// drops, duplicates and reorders. Optionally a worker dies midway.
void random_program(Sim& sim, std::mt19937& rng, int n, bool with_death) {
  auto pick = [&](int k) { return int(rng() % uint32_t(k)); };
  std::vector<Handle> live;
  int values = 1 + pick(3);
  for (int v = 0; v < values; ++v)
    live.push_back(pick(2) ? sim.make_rref(WorkerId(pick(n))) : sim.remote(WorkerId(pick(n)), WorkerId(pick(n))));
  int steps = 4 + pick(12);
  int dead = with_death ? pick(n) : -1;
  int death_step = with_death ? pick(steps) : -1;
  for (int s = 0; s < steps && !live.empty(); ++s) {
    if (s == death_step) sim.kill(WorkerId(dead), 5 + pick(40));
    std::vector<Handle> holders;  // handles whose worker has the state now
    for (auto h : live)
      if (sim.holds(h)) holders.push_back(h);
    if (!holders.empty()) {
      auto from = holders[size_t(pick(int(holders.size())))];
      // A third of the passes go to a function that takes the value (G3).
      live.push_back(pick(3) == 0 ? sim.borrow(from, WorkerId(pick(n))) : sim.share(from, WorkerId(pick(n))));
    }
    if (pick(3) == 0) {
      auto i = size_t(pick(int(live.size())));
      sim.drop(live[i]);
      live.erase(live.begin() + long(i));
    }
    sim.run_for(pick(60));
  }
  std::shuffle(live.begin(), live.end(), rng);
  for (auto h : live) {
    sim.drop(h);
    sim.run_for(pick(30));
  }
}

}  // namespace

TEST_CASE("random fork trees under random faults: no value ends while a fork lives, and everything ends") {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int runs = 0;
  for (uint64_t seed = 1; seed <= 400 && std::chrono::steady_clock::now() < deadline; ++seed, ++runs) {
    CAPTURE(seed);
    std::mt19937 rng{uint32_t(seed)};
    Sim sim(4, seed, Faults{0.15, 0.15, 1, 120});
    random_program(sim, rng, 4, /*with_death=*/false);
    REQUIRE(sim.run_until_quiet(600000));
    REQUIRE_MESSAGE(sim.violations().empty(), violations_of(sim));
    REQUIRE_MESSAGE(sim.all_clear(), sim.leftovers());
  }
  CHECK(runs >= 100);
}

TEST_CASE("random fork trees with a worker dying midway: everything on the living workers ends") {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int runs = 0;
  for (uint64_t seed = 1; seed <= 400 && std::chrono::steady_clock::now() < deadline; ++seed, ++runs) {
    CAPTURE(seed);
    std::mt19937 rng{uint32_t(seed) + 7919};
    Sim sim(4, seed, Faults{0.15, 0.15, 1, 120});
    random_program(sim, rng, 4, /*with_death=*/true);
    REQUIRE(sim.run_until_quiet(600000));
    REQUIRE_MESSAGE(sim.all_clear(), sim.leftovers());
  }
  CHECK(runs >= 100);
}
