// Peers: who is connected, who is alive. Every peer is monitored; a peer whose
// connection is lost is dead (that incarnation of it, for the rest of the
// job: Note [Rejoin] in rejoin.cpp), and every call waiting on it fails at
// once with "worker <name> is unreachable".
#include <cstdio>

#include <caf/typed_event_based_actor.hpp>

#include "actors/cluster/launch_notes.hpp"
#include "actors/runtime/runtime.hpp"
#include "actors/transport/bulk/bulk_path.hpp"
#include "actors/runtime/worker_state.hpp"

namespace castor::detail {

bool add_peer_impl(worker_pointer self, WorkerId rank, worker_peer handle) {
  auto& st = self->state;
  if (rank < 0 || size_t(rank) >= st.peers.size() || rank == st.rt->rank() || !handle) return false;
  auto& slot = st.peers[size_t(rank)];
  if (!slot) {
    st.dead_nodes.erase(handle.node());  // a new life that got its old life's node id (Note [Rejoin])
    slot = PeerSlot{handle};
    st.rank_by_addr[handle.address()] = rank;
    self->monitor(handle);
  }
  if (all_peers_known(self)) {
    for (auto& rp : st.ready_waiters) rp.deliver(peer_handles(self));
    st.ready_waiters.clear();
  }
  return true;
}

bool all_peers_known(worker_pointer self) {
  const auto& st = self->state;
  for (size_t r = 0; r < st.peers.size(); ++r)
    if (WorkerId(r) != st.rt->rank() && !st.peers[r]) return false;
  return true;
}

std::vector<worker_peer> peer_handles(worker_pointer self) {
  std::vector<worker_peer> out(self->state.peers.size());
  for (size_t r = 0; r < out.size(); ++r)
    if (self->state.peers[r]) out[r] = self->state.peers[r]->handle;
  return out;
}

bool peer_usable(worker_pointer self, WorkerId rank) {
  return self->state.peers[size_t(rank)].has_value() && self->state.rt->world().alive(rank);
}

bool drop_stale(worker_pointer self) {
  auto& st = self->state;
  if (st.dead_nodes.empty()) return false;
  const auto& sender = self->current_sender();
  if (!sender || !st.dead_nodes.count(sender->node())) return false;
  if (st.rt->stats.stale_refused.fetch_add(1) == 0)
    std::fprintf(stderr, "castor[%s]: refused a message from a dead life of a peer (node %s); such messages are counted "
                 "in castor inspect's messages.stale_refused\n",
                 st.rt->name().c_str(), caf::to_string(sender->node()).c_str());
  return true;
}

void on_peer_down_impl(worker_pointer self, const caf::down_msg& dm) {
  auto& st = self->state;
  auto it = st.rank_by_addr.find(dm.source);
  // RJ3 of Note [Rejoin]: a dead life's handle was forgotten when its rank
  // rejoined, so its late down message finds no rank.
  if (it == st.rank_by_addr.end()) return;
  declare_dead_impl(self, it->second, "connection lost");
}

void declare_dead_impl(worker_pointer self, WorkerId rank, const std::string& cause) {
  auto& st = self->state;
  auto* rt = st.rt;
  if (!st.peers[size_t(rank)] || !rt->world().alive(rank)) return;
  st.dead_nodes.insert(st.peers[size_t(rank)]->handle.node());  // RJ6 of Note [Rejoin]
  // M2 of Note [World]: dead in the published world before its calls fail
  // (Note [Direct sends]); a dead worker stays dead.
  rt->membership.update([&](const World& w) { return w.with_death(rank, std::chrono::system_clock::now()); });
  st.chunks.drop_from(rank);
  if (rt->bulk) rt->bulk->peer_down(rank);  // B8 of Note [Bulk path]
  auto who = rt->name_of(rank);
  // N2 of Note [Launch notes]: before the calls fail, so the note is there
  // whatever the program does about them.
  if (rank == 0 && rt->rank() != 0 && rt->state.load() != RunState::stopped)
    tell_launcher(kRankZeroLost, who + ": " + cause);
  if (rt->state.load() != RunState::stopped) {
    int64_t failed = 0;
    fail_pending_impl(
        self, [rank](const PendingCall& c) { return c.to == rank; },
        [who, &failed](const PendingCall& c) {
          ++failed;
          return make_error(ErrorKind::Unreachable, who,
                            "worker " + who + " is unreachable (connection lost while calling '" + c.function + "')");
        });
    rt->released.add(rank, "calls_failed", failed);
  }
  if (rt->rrefs) rt->rrefs->on_peer_down(rank);
  if (rt->autograd) rt->autograd->on_peer_down(rank);
  // The app hears of it once this worker has cleaned up after it, and before
  // graceful shutdown decides (F3 of Note [Failure handlers]); not once this
  // worker is leaving (F4).
  bool leaving = rt->state.load() == RunState::stopped || st.shutdown.finishing ||
                 (st.shutdown.requested && rt->rank() != 0);
  if (!leaving) {
    const auto& dead = rt->world().member(rank);
    rt->failures.on_death(WorkerFailure{WorkerInfo{who, int64_t(rank)}, dead.died_at, cause},
                          rt->callback_runner());
  }
  on_peer_lost_during_shutdown_impl(self, rank);
}

}  // namespace castor::detail
