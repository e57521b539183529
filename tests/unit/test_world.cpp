// Note [World]: snapshots never change (M1), one bounds check (M3), the
// change hook sees the old and the new world after the new one is current
// (M2), and a reference taken earlier stays valid (M4).
#include <doctest/doctest.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <vector>

#include "actors/cluster/world.hpp"

using namespace castor;
using namespace castor::detail;

namespace {

std::vector<Member> three() {
  std::vector<Member> out(3);
  const char* names[] = {"ps", "trainer1", "trainer2"};
  for (int r = 0; r < 3; ++r) {
    out[size_t(r)].name = names[r];
    out[size_t(r)].rank = WorkerId(r);
    out[size_t(r)].host = "10.0.0." + std::to_string(r + 1);
    out[size_t(r)].port = uint16_t(29600 + r);
  }
  return out;
}

worker_peer::behavior_type idle_peer() { return {[](hello_atom, WorkerId) {}, [](CallRequest&) {}, [](CallReply&) {},
                                                 [](TensorChunk&) {}, [](RRefControl&) {}, [](RRefControlAck&) {},
                                                 [](BackwardGrad&) {}, [](BackwardDone&) {}, [](ContextControl&) {},
                                                 [](join_atom, JoinRequest&) { return JoinReply{}; },
                                                 [](info_atom) { return std::vector<WorkerRecord>{}; },
                                                 [](joined_atom, WorkerId) { return true; },
                                                 [](shutdown_atom, WorkerId) {},
                                                 [](probe_atom, int64_t) { return TerminationReport{}; },
                                                 [](deadline_atom, std::string) { return true; },
                                                 [](done_atom) { return true; }}; }

}  // namespace

TEST_CASE("a world answers by rank and name, and bounds-checks every rank in one place (M3)") {
  World w(1, 1, three());
  CHECK(w.self() == 1);
  CHECK(w.self_name() == "trainer1");
  CHECK(w.rank_of("trainer2") == WorkerId(2));
  CHECK_FALSE(w.rank_of("nobody"));
  CHECK(w.name_of(0) == "ps");
  CHECK(w.name_of(7) == "rank 7");
  CHECK(w.name_of(-1) == "rank -1");
  for (WorkerId hostile : {WorkerId(-1), WorkerId(3), WorkerId(32767)}) {
    CHECK_FALSE(w.has(hostile));
    CHECK_FALSE(w.alive(hostile));
    CHECK_FALSE(w.peer(hostile));
  }
  CHECK(w.alive(1));            // ourselves
  CHECK_FALSE(w.peer(1));       // never a peer of ourselves
  CHECK_FALSE(w.peer(0));       // alive but not connected yet
  CHECK_THROWS_AS(World(0, 1, {three()[1]}), std::logic_error);  // a member out of place
}

TEST_CASE("a change is a new world with the next epoch, the old one stays as it was (M1)") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto peer0 = sys.spawn(idle_peer), peer2 = sys.spawn(idle_peer);
  World before(1, 4, three());
  auto connected = before.with_handles({peer0, worker_peer{}, peer2});
  CHECK(connected.epoch() == 5);
  CHECK(connected.peer(0) == peer0);
  CHECK_FALSE(before.peer(0));
  auto when = std::chrono::system_clock::now();
  auto after = connected.with_death(2, when);
  CHECK(after.epoch() == 6);
  CHECK_FALSE(after.alive(2));
  CHECK_FALSE(after.peer(2));
  CHECK(after.member(2).died_at == when);
  CHECK(connected.peer(2) == peer2);  // unchanged
  // New records keep handles and deaths they do not know about.
  auto records = three();
  records[0].bulk_port = 40000;
  auto refreshed = after.with_members(records);
  CHECK(refreshed.member(0).bulk_port == 40000);
  CHECK(refreshed.peer(0) == peer0);
  CHECK_FALSE(refreshed.alive(2));
  caf::anon_send_exit(peer0, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(peer2, caf::exit_reason::user_shutdown);
}

TEST_CASE("membership publishes the next epoch, then tells the hooks, old references stay valid (M2, M4)") {
  Membership m;
  CHECK(m.current().epoch() == 0);
  CHECK(m.current().size() == 0);
  std::vector<std::pair<uint64_t, uint64_t>> seen;
  bool current_when_hooked = false;
  m.on_change([&](const World& before, const World& after) {
    seen.emplace_back(before.epoch(), after.epoch());
    current_when_hooked = &m.current() == &after;
  });
  m.update([](const World& w) { return World(0, w.epoch() + 1, three()); });
  const World& first = m.current();
  m.update([](const World& w) { return w.with_death(2, std::chrono::system_clock::now()); });
  CHECK(seen == std::vector<std::pair<uint64_t, uint64_t>>{{0, 1}, {1, 2}});
  CHECK(current_when_hooked);  // a hook sees the new world already published
  CHECK(first.alive(2));       // M4: still readable, still as it was
  CHECK_FALSE(m.current().alive(2));
  // Skipping or repeating an epoch is a bug, refused loudly.
  CHECK_THROWS_AS(m.update([](const World& w) { return World(0, w.epoch(), three()); }), std::logic_error);
  CHECK(m.current().epoch() == 2);
}

TEST_CASE("a rejoin is a new world: the rank alive again in its new life, with its handle (Note [Rejoin])") {
  auto world = World(0, 1, three()).with_death(2, std::chrono::system_clock::now());
  CHECK_FALSE(world.any_rejoined());
  auto again = three()[2];
  again.incarnation = 2;
  again.port = 7002;
  again.alive = false;  // whatever the record says: a rejoin is alive
  auto back = world.with_rejoin(again);
  CHECK(back.epoch() == world.epoch() + 1);
  CHECK(back.alive(2));
  CHECK(back.member(2).incarnation == 2);
  CHECK(back.member(2).port == 7002);
  CHECK(back.member(2).died_at == std::chrono::system_clock::time_point{});
  CHECK(back.any_rejoined());
  CHECK_FALSE(world.alive(2));  // M1: the old world is as it was
  // Records carry the life and the liveness both ways.
  auto rec = back.member(2).record();
  CHECK(rec.incarnation == 2);
  CHECK(Member::from(rec).incarnation == 2);
}

TEST_CASE("ids carry their maker's incarnation: a new life never hands out an id of its old one (Note [Incarnation ids])") {
  IdGenerator<RRefId> first(2), second(2, 2), last(2, kMaxIncarnation);
  auto a = first.next(), b = second.next(), c = last.next();
  CHECK(a.worker() == 2);
  CHECK(b.worker() == 2);
  CHECK(a != b);
  CHECK(incarnation_of(a) == 1);
  CHECK(incarnation_of(b) == 2);
  CHECK(incarnation_of(c) == kMaxIncarnation);
  CHECK(a.local() == 1);  // incarnation 1 keeps the plain counter
  CHECK(c.worker() == 2);  // the top incarnation stays inside the local part
}

