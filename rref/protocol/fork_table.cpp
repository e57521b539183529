// ForkTable: the user side of the RRef protocol (see fork_table.hpp and Note
// [RRef protocol] in rref/rref_context.hpp).
#include "rref/protocol/fork_table.hpp"

#include <utility>

namespace castor::detail {

ForkTable::ForkTable(WorkerId self, TableGauge& pending_users, TableGauge& pending_children)
    : self_(self), pending_users_gauge_(pending_users), pending_children_gauge_(pending_children) {}

void ForkTable::drop_user(std::unordered_map<ForkId, PendingUser>::iterator it) {
  pending_users_.erase(it);
  pending_users_gauge_.add(-1);
}

void ForkTable::drop_child(std::unordered_map<ForkId, PendingChild>::iterator it) {
  pending_children_.erase(it);
  pending_children_gauge_.add(-1);
}

// -- a fork leaves ---------------------------------------------------------------------

std::optional<OwnerEvent> ForkTable::fork_registered(const RRefStatePtr& state, ForkId fork, WorkerId to) {
  if (is_dead(to) || is_dead(state->owner)) return std::nullopt;  // the call fails; nothing to protect
  // Owner -> user: count the fork before it can be used (or deleted).
  if (state->is_owner()) return OwnerEvent::add_fork(state->id, fork, to, /*from_peer=*/false);
  // G2: until the owner has confirmed the child, our own fork (held by
  // `state`) must not be deleted, or the owner could end the value while the
  // child's fork is still unknown to it.
  if (pending_children_.emplace(fork, PendingChild{state, to}).second) pending_children_gauge_.add(1);
  return std::nullopt;
}

// -- a fork arrives -----------------------------------------------------------------------

Arrival ForkTable::arrival_of(const RRefForkData& d) const {
  if (d.owner == self_) return Arrival::at_owner;
  return d.parent == d.owner ? Arrival::from_owner : Arrival::from_user;
}

ArrivedAtOwner ForkTable::arrived_at_owner(const RRefForkData& d) const {
  // The owner does not count this fork: it uses its own OwnerRRef (one more
  // local reference). That reference is counted before the child_accept
  // leaves, so the parent's fork may go as soon as it arrives.
  ArrivedAtOwner out{OwnerEvent::local_ref(d.rref_id, +1, /*may_make_owner=*/true), std::nullopt};
  if (d.parent != self_) out.release_parent = ControlToSend{d.parent, RRefOp::child_accept, d.rref_id, d.fork_id};
  return out;
}

void ForkTable::arrived_from_owner(RRefState& state) const {
  state.confirmed = true;  // the owner counted this fork before sending it
}

ArrivedFromUser ForkTable::arrived_from_user(const RRefStatePtr& state, WorkerId parent, PreparedCallId waiting) {
  if (is_dead(state->owner)) return ArrivedFromUser{std::nullopt, true};
  auto [it, fresh] = pending_users_.try_emplace(state->fork);
  auto& pu = it->second;
  pu.states.push_back(state);
  if (waiting) pu.waiting.push_back(waiting);
  if (!fresh) return {};  // the same fork again: its fork_request is out already
  pu.parent = parent;
  pending_users_gauge_.add(1);
  // Ask the owner to count our fork; the parent is told after (child_accept).
  return ArrivedFromUser{ControlToSend{state->owner, RRefOp::fork_request, state->id, state->fork}, false};
}

std::optional<ControlToSend> ForkTable::borrowed(const RRefForkData& d) const {
  if (arrival_of(d) != Arrival::from_user || is_dead(d.owner) || is_dead(d.parent) || d.recipe) return std::nullopt;
  return ControlToSend{d.parent, RRefOp::child_accept, d.rref_id, d.fork_id};
}

// -- a handle's last copy is gone -------------------------------------------------------------

Released ForkTable::released(RRefId rref, ForkId fork, WorkerId owner, bool owner_side) const {
  if (owner_side) return Released{OwnerEvent::local_ref(rref, -1, /*may_make_owner=*/false), std::nullopt};
  // G1: the owner is told of every deleted fork (retried until acknowledged).
  return Released{std::nullopt, ControlToSend{owner, RRefOp::user_delete, rref, fork}};
}

// -- control messages ---------------------------------------------------------------------------

std::optional<OwnerEvent> ForkTable::control_received(const RRefControl& msg) {
  switch (msg.op) {
    case RRefOp::fork_request:  // we own msg.rref: count the child's fork
      if (is_dead(msg.holder)) return std::nullopt;  // a late request from a dead worker: its fork is gone
      return OwnerEvent::add_fork(msg.rref, msg.fork, msg.holder, /*from_peer=*/true);
    case RRefOp::child_accept: {  // G2: the child is confirmed, our fork may go (a repeat finds nothing)
      auto it = pending_children_.find(msg.fork);
      if (it != pending_children_.end()) drop_child(it);
      return std::nullopt;
    }
    case RRefOp::user_delete:  // G1: a fork is gone (maybe before its add arrives)
      return OwnerEvent::del_fork(msg.rref, msg.fork);
  }
  return std::nullopt;
}

std::optional<ForkConfirmed> ForkTable::acknowledged(const RRefControl& acked) {
  if (acked.op != RRefOp::fork_request) return std::nullopt;
  auto it = pending_users_.find(acked.fork);
  if (it == pending_users_.end()) return std::nullopt;
  auto entry = std::move(it->second);
  drop_user(it);
  // The owner counts our fork now: tell the parent, then run what waited.
  for (auto& s : entry.states) s->confirmed = true;
  return ForkConfirmed{ControlToSend{entry.parent, RRefOp::child_accept, acked.rref, acked.fork},
                       std::move(entry.waiting)};
}

// -- dead peers ------------------------------------------------------------------------------------

std::vector<PreparedCallId> ForkTable::peer_down(WorkerId rank) {
  dead_.insert(rank);
  for (auto it = pending_children_.begin(); it != pending_children_.end();) {
    auto next = std::next(it);
    if (it->second.child == rank || it->second.state->owner == rank) drop_child(it);
    it = next;
  }
  std::vector<PreparedCallId> failed;
  for (auto it = pending_users_.begin(); it != pending_users_.end();) {
    auto next = std::next(it);
    if (it->second.states.front()->owner == rank) {
      failed.insert(failed.end(), it->second.waiting.begin(), it->second.waiting.end());
      drop_user(it);
    }
    it = next;
  }
  return failed;
}

}  // namespace castor::detail
