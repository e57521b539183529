// A worker that died comes back: its new life checks in with the survivors
// (rejoin_world, on the new worker's init thread), and they take it back
// (accept_rejoin_impl, on each survivor's worker actor).
#include <cstdio>

#include <caf/typed_event_based_actor.hpp>

#include "actors/cluster/join_steps.hpp"
#include "actors/cluster/name_store.hpp"
#include "actors/runtime/runtime.hpp"
#include "actors/runtime/worker_state.hpp"

namespace castor::detail {

// Note [Rejoin]
// ~~~~~~~~~~~~~
// A worker other than rank 0 that dies can be started again (the launcher
// does it under --max-restarts: Note [Restart policy]). The new process is
// the same rank and name in a new life, its incarnation (1, 2, ...:
// WorkerOptions::incarnation, CASTOR_INCARNATION). The world is complete and
// rank 0's name store answered long ago, so it does not join; it rejoins:
//  RJ1 It listens as any worker does, then checks in with rank 0 first (the
//      master, or the cluster's first worker): rank 0 answers with the world
//      as it stands, every member's address, life and liveness. Rank 0
//      never rejoins: its death restarts the whole job.
//  RJ2 It then checks in with every other member rank 0 knows alive, lower
//      or higher rank (nobody connects to it), and hands each to its worker
//      actor, which says hello. A member it cannot reach is dead in its
//      world. It publishes that world and serves.
//  RJ3 A survivor takes rank r back only for a higher incarnation than the
//      one it knows, from a compatible worker (the name store's checks),
//      while it runs. If it still thinks the old life alive (a host that
//      vanished without closing its sockets), that life is declared dead
//      first, as if its connection had been lost: its calls fail, its RRefs
//      and contexts end, the app hears of it. Then the old life is
//      forgotten: its handle (its late down message then finds no rank)
//      and its entry into graceful shutdown (V4 of Note [Graceful
//      shutdown]).
//  RJ4 The new life is published alive with its handle at once: its worker
//      actor comes in the request (a hello would come later, and a call to
//      it made in between would find no handle). Its later hello finds the
//      slot taken and changes nothing.
//  RJ5 Nothing of a dead life serves the new one. Ids carry the incarnation
//      (Note [Incarnation ids] in messages/ids.hpp), so the new life never
//      hands out an id the old one did, and an RRef, fork or autograd
//      context of the old life stays dead (OwnerDiedError) instead of
//      naming an object of the new one. A bulk link belongs to one life: a
//      sender retires the link of an earlier life instead of reusing it, and
//      a reader drops its link once its peer's life changed. The RRef
//      protocol learns of the new life after the old one's death, so that
//      events of the new life are not settled as the dead one's.
//  RJ6 A dead life that is still connected (a frozen host that wakes up)
//      may still speak: the worker actor refuses and counts every message
//      from the node of a peer's dead life (drop_stale), whatever it is.
//  RJ7 Once rank 0 has entered graceful shutdown, the job's work is done:
//      it refuses a rejoin as "ending", and the new life's init_rpc throws
//      a ShutdownError (castor's own worker runner then exits 0: nothing is
//      left to rejoin). The other workers accept rejoins while they serve
//      in shutdown, since rank 0 may still be running the app.
//  RJ8 A life that died before the world finished joining left nothing to
//      rejoin: rank 0 is still joining (and will fail, missing it). The new
//      life's init_rpc throws a RejoinError; castor's worker runner exits
//      with kExitRestartJob, and the launcher starts the whole job again
//      (Note [Restart policy], R6).
//  RJ9 Two lives may rejoin at once (two trainers killed together). One
//      still in rejoin_world, asked by the other, takes it back there and
//      then, not "still joining" (that would leave them dead to each other
//      for good): its handle into the worker actor's peers, its record into
//      the world being built. rejoin_world's final world then keeps, for
//      each rank, the later life: what its own check-in found or what such
//      a request brought. A first life (a world still forming) refuses, as
//      RJ8 says.
// Not covered: CAF 0.17 names a node by (process id, host hash). A new life
// whose pid repeats its old life's on the same host (a container restarted
// whole) while a survivor still has a route to the old one is refused by
// BASP until that route is gone (the old connection's heartbeat or close).

namespace {

JoinReply refuse(const std::string& why) { return JoinReply{false, false, why, {}, false, false}; }

// Puts `handle` in rank's slot of the worker actor's peers, in place of
// whatever life held it.
void take_slot(worker_pointer self, WorkerId rank, const worker_peer& handle) {
  auto& st = self->state;
  auto& slot = st.peers[size_t(rank)];
  if (slot) {
    st.rank_by_addr.erase(slot->handle.address());
    self->demonitor(slot->handle.address());
    slot.reset();
  }
  add_peer_impl(self, rank, handle);  // monitored from here
}

// Why the request cannot be taken whatever our world says of its rank (a
// build that does not match ours, no worker actor to call); empty if none.
std::string unusable_request(worker_pointer self, const JoinRequest& req, const std::string& label,
                             const std::string& here) {
  auto& st = self->state;
  if (!st.own_join_request) st.own_join_request = make_join_request(*st.rt);
  if (auto why = incompatibility(*st.own_join_request, req, here); !why.empty()) return why;
  if (!req.actor) return label + " cannot rejoin: its request names no worker actor";
  return {};
}

// RJ4: the new life takes its rank's slot and is published alive with its
// handle.
void install_life(worker_pointer self, const JoinRequest& req) {
  auto handle = caf::actor_cast<worker_peer>(req.actor);
  take_slot(self, req.self.rank, handle);
  auto member = Member::from(req.self);
  member.handle = handle;
  self->state.rt->membership.update([&](const World& w) { return w.with_rejoin(std::move(member)); });
}

// RJ9: we are rejoining too, and our world is not built yet.
JoinReply accept_early_rejoin(worker_pointer self, const JoinRequest& req, const std::string& label,
                              const std::string& here) {
  auto* rt = self->state.rt;
  const auto& who = req.self;
  // A request can come between our listening and our first world (a fixed
  // port that the rejoiner knew from our old life).
  if (rt->world().size() == 0)
    return refuse(label + " cannot rejoin through " + here + ", which is still starting");
  if (who.rank <= 0 || !rt->world().has(who.rank) || who.rank == rt->rank())
    return refuse(label + " cannot rejoin: " + here + " has no such peer rank");
  if (auto why = unusable_request(self, req, label, here); !why.empty()) return refuse(why);
  const auto& known = rt->world().member(who.rank);
  if (known.handle && known.incarnation >= who.incarnation)  // already ours (our check-in reached it)
    return JoinReply{true, false, {}, {rt->world().member(rt->rank()).record()}};
  install_life(self, req);
  std::fprintf(stderr, "castor[%s]: %s rejoined (incarnation %u) while we rejoin\n", rt->name().c_str(),
               who.name.c_str(), unsigned(who.incarnation));
  return JoinReply{true, false, {}, {rt->world().member(rt->rank()).record()}};
}

}  // namespace

JoinReply accept_rejoin_impl(worker_pointer self, const JoinRequest& req) {
  auto& st = self->state;
  auto* rt = st.rt;
  const auto& who = req.self;
  auto label = "worker '" + who.name + "' (rank " + std::to_string(who.rank) + ", incarnation " +
               std::to_string(who.incarnation) + ")";
  auto here = "worker '" + rt->name() + "'";
  auto run_state = rt->state.load();
  if (run_state == RunState::starting && rt->opts.incarnation > 1) return accept_early_rejoin(self, req, label, here);
  if (run_state == RunState::starting) {  // RJ8
    auto reply = refuse(label + " cannot rejoin through " + here + ", which is still joining");
    reply.joining = true;
    return reply;
  }
  // RJ7: rank 0 in shutdown has ended the job's work; the others serve on
  // in shutdown until it says done.
  bool leaving = run_state == RunState::stopped || st.shutdown.finishing ||
                 (rt->rank() == 0 && run_state == RunState::shutting_down);
  if (leaving) {
    auto reply = refuse(label + " cannot rejoin: the job is ending (" + here + " is leaving)");
    reply.ending = true;
    return reply;
  }
  const auto& world = rt->world();
  if (!world.has(who.rank) || who.rank == rt->rank() || who.rank == 0)
    return refuse(label + " cannot rejoin: " + here + " has no such peer rank");
  const auto& known = world.member(who.rank);
  if (known.name != who.name)
    return refuse(label + " cannot rejoin: rank " + std::to_string(who.rank) + " is '" + known.name + "' on " + here);
  if (who.incarnation <= known.incarnation)  // RJ3: a stale or repeated life
    return refuse(label + " cannot rejoin: " + here + " knows incarnation " + std::to_string(known.incarnation) +
                  " of it; a rejoin needs a higher one");
  if (auto why = unusable_request(self, req, label, here); !why.empty()) return refuse(why);
  // RJ3: the old life is dead before the new one exists.
  if (known.alive) declare_dead_impl(self, who.rank, "replaced by its incarnation " + std::to_string(who.incarnation));
  st.shutdown.entered.erase(who.rank);
  rt->failures.on_rejoin(who.rank);  // F5 of Note [Failure handlers]
  install_life(self, req);  // RJ4
  if (rt->rrefs) rt->rrefs->on_peer_rejoined(who.rank, who.incarnation);  // RJ5: after its on_peer_down
  std::fprintf(stderr, "castor[%s]: %s rejoined (incarnation %u)\n", rt->name().c_str(), who.name.c_str(),
               unsigned(who.incarnation));
  JoinReply reply{true, false, {}, {}};
  if (rt->rank() == 0) {  // RJ1: the whole world
    for (const auto& m : rt->world().members()) reply.workers.push_back(m.record());
  } else {
    reply.workers.push_back(rt->world().member(rt->rank()).record());
  }
  return reply;
}

void rejoin_world(Runtime& rt, std::chrono::steady_clock::time_point deadline) {
  auto n = size_t(rt.opts.world_size);
  auto life = " (incarnation " + std::to_string(rt.opts.incarnation) + ")";
  if (rt.rank() == 0)
    fail_init(rt.name(), ErrorKind::Lookup,
              "rank 0 cannot rejoin" + life + ": its death restarts the whole job (README, \"When workers fail\")");
  auto mine = make_join_request(rt);
  mine.actor = caf::actor_cast<caf::strong_actor_ptr>(rt.actor);  // RJ4
  caf::scoped_actor self{*rt.system};
  // Checks in with `h`; its answer, or why not.
  auto check_in = [&](const worker_peer& h, const std::string& what, std::chrono::steady_clock::time_point until,
                      JoinReply& reply) -> std::string {
    bool answered = false;
    caf::error failure;
    self->request(h, left_until(until), join_atom::value, mine)
        .receive([&](JoinReply& x) { reply = std::move(x), answered = true; },
                 [&](caf::error& e) { failure = std::move(e); });
    if (!answered) return what + " did not answer: " + rt.system->render(failure);
    if (!reply.ok) return what + " refused: " + reply.error;
    return {};
  };
  // RJ1: rank 0 gives the world.
  const auto& cluster = rt.opts.cluster;
  auto host0 = cluster.empty() ? rt.opts.master.host : cluster[0].host;
  auto port0 = cluster.empty() ? rt.opts.master.port : cluster[0].port;
  auto h0 = connect_with_retry(rt, host0, port0, deadline, "rank 0");
  JoinReply world_reply;
  auto why0 = check_in(h0, "rank 0", deadline, world_reply);
  if (!why0.empty() && world_reply.joining)  // RJ8
    throw RejoinError(ErrorInfo{ErrorKind::Unreachable, rt.name(),
                                "init_rpc(" + rt.name() + "): cannot rejoin" + life + ": " + why0 +
                                    "; the world its previous life died from never finished joining, so the job must "
                                    "start again whole"});
  if (auto why = why0; !why.empty())
    fail_init(rt.name(), world_reply.ending ? ErrorKind::Shutdown : ErrorKind::Unreachable,
              "cannot rejoin" + life + ": " + why);  // RJ7: a ShutdownError when the job is ending
  if (world_reply.workers.size() != n)
    fail_init(rt.name(), ErrorKind::Internal,
              "cannot rejoin" + life + ": rank 0 described " + std::to_string(world_reply.workers.size()) +
                  " workers, world_size is " + std::to_string(n));
  std::vector<Member> members(n);
  for (size_t r = 0; r < n; ++r) {
    if (world_reply.workers[r].rank != WorkerId(r))
      fail_init(rt.name(), ErrorKind::Internal, "cannot rejoin" + life + ": rank 0's world has no rank " + std::to_string(r));
    members[r] = Member::from(world_reply.workers[r]);
  }
  members[size_t(rt.rank())] = rt.world().member(rt.rank());  // ourselves as we listen
  members[0].handle = h0;
  register_peer(rt, self, 0, h0, members[0].name, deadline);
  // RJ2: every other live member; one that is gone is dead here.
  for (size_t r = 1; r < n; ++r) {
    auto& m = members[r];
    if (WorkerId(r) == rt.rank() || !m.alive) continue;
    auto until = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(10));
    std::string why;
    try {
      auto h = connect_with_retry(rt, m.host, m.port, until, "worker " + m.name);
      JoinReply reply;
      why = check_in(h, "worker " + m.name, until, reply);
      if (why.empty() && (reply.workers.size() != 1 || reply.workers[0].rank != WorkerId(r)))
        why = "worker " + m.name + " answered as someone else";
      if (why.empty()) {
        m = Member::from(reply.workers[0]);
        m.handle = h;
        register_peer(rt, self, WorkerId(r), h, m.name, until);
      }
    } catch (const RpcError& e) {
      why = e.what();
    }
    if (!why.empty()) {
      std::fprintf(stderr, "castor[%s]: rejoining without %s: %s\n", rt.name().c_str(), m.name.c_str(), why.c_str());
      m.alive = false;
      m.died_at = std::chrono::system_clock::now();
      m.handle = nullptr;
    }
  }
  rt.membership.update([&](const World& w) {
    for (auto& m : members) {
      if (!w.has(m.rank) || m.rank == rt.rank()) continue;
      const auto& now = w.member(m.rank);
      // RJ9: a later life that checked in with us meanwhile (or one our
      // check-in did not reach) is the one we keep.
      if (now.handle && now.incarnation > m.incarnation) {
        m = now;
        continue;
      }
      if (now.handle && now.incarnation == m.incarnation && !m.handle && now.alive) {
        m = now;
        continue;
      }
      // A peer that our worker actor found dead meanwhile (the same life)
      // stays dead.
      if (!now.alive && now.incarnation == m.incarnation && now.died_at != std::chrono::system_clock::time_point{}) {
        m.alive = false;
        m.died_at = now.died_at;
        m.handle = nullptr;
      }
    }
    return World(rt.rank(), w.epoch() + 1, std::move(members));
  });
  declare_running(rt);
}

}  // namespace castor::detail
