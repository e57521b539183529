// The RRef context actor (see Note [RRef protocol] in rref_context.hpp): the
// protocol's I/O and scheduling. Each handler hands its event to the plain
// class that keeps the rule (rref/protocol/) and sends what it returns:
// control messages through the outbox, acks, events to the owners (applied
// here, or sent to an owner actor: Note [Light owners]).
#include "rref/rref_context.hpp"

#include <chrono>
#include <vector>

#include <caf/send.hpp>

#include "actors/hooks/worker_services.hpp"
#include "rref/calls/call_preparation.hpp"
#include "rref/calls/remote_calls.hpp"
#include "rref/context_state.hpp"
#include "rref/rref_runtime.hpp"

namespace castor::detail {

// -- sending ---------------------------------------------------------------------------

namespace {

// One copy of a control message or ack, through the test's fault injection.
template <class Message>
void transmit(context_pointer self, WorkerId to, const char* kind, const Message& msg) {
  auto peer = self->state.rt->world().peer(to);
  if (!peer) return;  // dead: on_peer_down drops what was meant for it
  auto plan = self->state.rr->faults().decide(kind);
  if (plan.drop) return;  // fault injection: the retry will resend it
  for (int i = 0; i < plan.copies; ++i) {
    if (plan.delay.count() > 0)
      self->delayed_send(*peer, plan.delay, msg);
    else
      self->state.rt->send_to_peer(to, Message(msg));  // B10 of Note [Bulk path]
  }
}

void transmit(context_pointer self, const Transmission& t) { transmit(self, t.to, to_string(t.msg.op), t.msg); }

void schedule_retry(context_pointer self) {
  auto& st = self->state;
  if (st.retry_scheduled || st.outbox->empty()) return;
  st.retry_scheduled = true;
  self->delayed_send(self, st.outbox->policy().tick, retry_atom::value);
}

void retry_due(context_pointer self) {
  auto& st = self->state;
  st.retry_scheduled = false;
  for (auto& t : st.outbox->due(std::chrono::steady_clock::now())) transmit(self, t);
  schedule_retry(self);
}

}  // namespace

void send_control(context_pointer self, const ControlToSend& c) {
  auto& st = self->state;
  const auto& world = st.rt->world();
  if (c.to < 0 || (world.has(c.to) && !world.alive(c.to))) return;  // a dead peer needs no news
  transmit(self, st.outbox->post(c, std::chrono::steady_clock::now()));
  schedule_retry(self);
}

// -- lives of peers (Note [Rejoin]) ------------------------------------------------------

namespace {

// RJ5: `owner` rejoined since the life `life` that held a value died: the
// new life never had that value, nor a fork of it to delete.
bool owner_life_gone(context_pointer self, WorkerId owner, uint32_t life) {
  const auto& world = self->state.rt->world();
  return world.has(owner) && world.member(owner).incarnation != life;
}

// RJ5: `id` was made by an earlier life of its worker (Note [Incarnation
// ids]): no create of it will ever come.
bool made_by_earlier_life(context_pointer self, RRefId id) {
  const auto& world = self->state.rt->world();
  return world.has(id.worker()) && incarnation_of(id) < world.member(id.worker()).incarnation;
}

}  // namespace

// -- owners ---------------------------------------------------------------------------

// Note [Light owners]
// ~~~~~~~~~~~~~~~~~~~
// A value's owner is a slot in this actor's OwnerDirectory. An OwnerRRef
// actor is spawned for it only when a method call arrives (its mailbox is
// the object's lock, Note [Remote objects]). Until then the slot keeps the
// value's OwnerForks and this actor applies the fork events to it itself:
// they start here anyway. So a value that is made, fetched and let go
// (remote() then to_here()) costs no actor to spawn, link, message and end;
// an actor's end also wakes CAF's clock thread to cancel its timeouts.
//  L1. A count lives in one place: the slot's, until owner_actor() hands it
//      to the new actor, which gets every event from then on, in the order
//      this actor sends them.
//  L2. A slot whose count says it may end (OwnerForks::may_end) ends at
//      once (end_owner), once the handler is done with it: to_owner returns
//      the holder, not the slot, and the peer_down sweep ends its slots
//      after the loop. A slot made for a value whose creator is already
//      dead may end as it is made (its creation will never come): whoever
//      made it ends it before anything else (end_if_done), so that no
//      event counts a fork on a value that will never be created.
//  L3. A fetch never needs the actor: it reads the holder (answer_fetch),
//      which says so if it holds an object.

namespace {

// The value `id` has ended: remembered as ended (never made again) and out
// of the index.
void forget_owner(context_pointer self, RRefId id) {
  self->state.owners.ended(id, std::chrono::steady_clock::now());
  self->state.rr->owner_index().removed(id);
}

// L2: a value whose count the slot kept ends (an owner actor counts itself
// out and sends owner_gone instead).
void end_owner(context_pointer self, RRefId id) {
  self->state.counters->owners.fetch_sub(1);
  forget_owner(self, id);
}

// L1: `e` on the count the slot keeps; true if the value may end now.
bool apply_here(context_pointer self, OwnerSlot& slot, const OwnerEvent& e) {
  apply_owner_event(*self->state.rt, *slot.forks, *slot.holder, e);
  return slot.forks->may_end();
}

}  // namespace

OwnerSlot* owner_slot(context_pointer self, RRefId id, bool make, std::shared_ptr<Holder> holder, bool remade) {
  auto& st = self->state;
  if (!make) return st.owners.find(id);
  return st.owners.find_or_make(id, [&] {
    holder = st.rr->owner_index().holder_for(id, std::move(holder));  // V1 of Note [Values on arrival]
    auto stats = std::make_shared<OwnerStats>();
    auto forks = std::make_shared<OwnerForks>(id.worker(), st.counters->forks, stats->forks);
    st.counters->owners.fetch_add(1);
    st.rr->owner_index().added(id, holder, stats);
    if (!remade && (st.forks->is_dead(id.worker()) || made_by_earlier_life(self, id)))
      apply_owner_event(*st.rt, *forks, *holder, OwnerEvent::peer_down(id, id.worker()));  // may end at once: L2
    return OwnerSlot{holder, std::move(forks), std::move(stats), owner_rref_actor{}};
  });
}

bool end_if_done(context_pointer self, RRefId id, OwnerSlot& slot) {
  if (slot.actor || !slot.forks->may_end()) return false;
  end_owner(self, id);
  return true;
}

std::shared_ptr<Holder> to_owner(context_pointer self, const OwnerEvent& e) {
  auto* slot = owner_slot(self, e.rref, e.may_make_owner);
  if (!slot) return nullptr;
  auto holder = slot->holder;
  if (slot->actor) {
    self->send(slot->actor, e);
    return holder;
  }
  // L2: a slot made just now for a creator already dead ends before any
  // event, which comes too late for it (as for the actor that ended first):
  // a dead caller's fork is never counted.
  if (!end_if_done(self, e.rref, *slot) && apply_here(self, *slot, e)) end_owner(self, e.rref);
  return holder;
}

owner_rref_actor owner_actor(context_pointer self, RRefId id, OwnerSlot& slot) {
  if (slot.actor) return slot.actor;
  auto me = caf::actor_cast<rref_context_actor>(self);
  slot.actor = spawn_owner_rref(self, *self->state.rt, id, slot.holder, slot.stats, std::move(slot.forks),
                                [life = self->state.rt->lifetime(), me, id] {
                                  deliver_while_alive(life, me, owner_gone_atom::value, id);
                                });
  self->link_to(slot.actor);  // owners end with the context (teardown)
  return slot.actor;
}

ErrorInfo gone_error(context_pointer self, RRefId id) {
  auto* rt = self->state.rt;
  return make_error(ErrorKind::Lookup, rt->name(),
                    "worker " + rt->name() + ": RRef " + to_string(id) + " no longer exists here (every fork was deleted)");
}

namespace {

// -- events ------------------------------------------------------------------------------

void on_control(context_pointer self, const RRefControl& msg) {
  if (auto e = self->state.forks->control_received(msg)) to_owner(self, *e);
  // Every control message is acknowledged, a repeated one too: handling is
  // idempotent, and the sender retries until it hears back.
  transmit(self, msg.id.worker(), "ack", RRefControlAck{msg.id});
}

void on_ack(context_pointer self, const RRefControlAck& ack) {
  auto& st = self->state;
  auto acked = st.outbox->acknowledge(ack.id);
  if (!acked) return;  // a repeated ack
  auto confirmed = st.forks->acknowledged(*acked);
  if (!confirmed) return;
  // The owner confirmed our fork: tell the parent, then run what waited.
  send_control(self, confirmed->release_parent);
  fork_confirmed_for(self, confirmed->calls);
}

void on_peer_down(context_pointer self, WorkerId rank) {
  auto& st = self->state;
  st.outbox->peer_down(rank);
  fork_lost_for(self, st.forks->peer_down(rank), rank);
  std::vector<RRefId> ended;  // L2: after the sweep
  st.owners.for_each([&](RRefId id, OwnerSlot& slot) {
    auto e = OwnerEvent::peer_down(id, rank);
    if (slot.actor)
      self->send(slot.actor, e);
    else if (apply_here(self, slot, e))
      ended.push_back(id);
  });
  for (auto id : ended) end_owner(self, id);
}

void on_fork_registered(context_pointer self, const ForkRegistration& r) {
  if (auto e = self->state.forks->fork_registered(r.state, r.fork, r.to)) to_owner(self, *e);
}

void release(context_pointer self, const Released& r) {
  if (r.owner) to_owner(self, *r.owner);
  if (r.send) send_control(self, *r.send);
}

void on_dropped(context_pointer self, const StateDropped& d) {
  if (!d.owner_side && owner_life_gone(self, d.owner, d.owner_incarnation)) return;  // RJ5: nobody to tell
  release(self, self->state.forks->released(d.rref, d.fork, d.owner, d.owner_side));
}

// Graceful shutdown: every handle still alive here lets go of its reference.
void release_all(context_pointer self) {
  auto& st = self->state;
  for (auto& s : st.rr->live_states().take_all()) {
    if (s->released.exchange(true)) continue;
    if (s->restart)  // uses that wait for the owner's next life (RS1, RS7) end now
      s->restart->finish(0, ErrorInfo{ErrorKind::Shutdown, st.rt->name(),
                                      "RRef " + to_string(s->id) + " was released by this worker's shutdown"});
    if (!s->is_owner() && owner_life_gone(self, s->owner, s->owner_incarnation)) continue;  // RJ5
    release(self, st.forks->released(s->id, s->fork, s->owner, s->is_owner()));
  }
}

void on_owner_registered(context_pointer self, const OwnerRegistration& r) {
  if (owner_slot(self, r.rref, true, r.holder)) {
    to_owner(self, OwnerEvent::local_ref(r.rref, +1, false));
    to_owner(self, OwnerEvent::created(r.rref, ForkId{}, -1));  // the handle holds it: it stays
  }
}

// remote()'s timeout bounds the creation of the value (as in PyTorch): past
// it the value is an error, which every use of the RRef then gets, on any
// worker (to_here, method calls, a fork passed on); the function's result,
// should it come later, is dropped (a Holder is set once).
void on_creation_due(context_pointer self, RRefId id, int64_t limit_ms) {
  auto* slot = owner_slot(self, id, false);
  if (!slot || slot->holder->is_set()) return;
  auto* rt = self->state.rt;
  slot->holder->set_error(ErrorInfo{ErrorKind::Timeout, rt->name(),
                                    "RRef " + to_string(id) + ": its value was not created on worker " + rt->name() +
                                        " within " + std::to_string(limit_ms) + " ms (the timeout of remote())"});
}

// An owner actor ended (it counted itself out of `owners`).
void on_owner_gone(context_pointer self, RRefId id) { forget_owner(self, id); }

using context_behavior_type = rref_context_actor::behavior_type;

context_behavior_type context_behavior(context_pointer self, RRefRuntime* rr) {
  auto& st = self->state;
  st.rr = rr;
  st.rt = &rr->services();
  st.counters = rr->counters_ptr();
  st.forks.emplace(st.rt->rank(), st.counters->pending_users, st.counters->pending_children);
  st.outbox.emplace(st.rt->rank(), st.counters->outbox);
  return {
      [self](RRefControl& msg) { on_control(self, msg); },
      [self](RRefControlAck& ack) { on_ack(self, ack); },
      [self](IncomingCall& ic) {
        if (ic.started) return count_started(self, std::move(ic));  // V2 of Note [Values on arrival]
        prepare_call(self, std::move(ic));
      },
      [self](ForkRegistration& r) { on_fork_registered(self, r); },
      [self](StateDropped& d) { on_dropped(self, d); },
      [self](OwnerRegistration& r) { on_owner_registered(self, r); },
      [self](AdoptReply& r) {
        adopt_value(self, r.value, 0);
        r.done(Outcome::success(std::move(r.value)));
      },
      [self](ArgumentReady& r) { on_argument_ready(self, std::move(r)); },
      [self](peer_down_atom, WorkerId rank) { on_peer_down(self, rank); },
      [self](rejoined_atom, WorkerId rank, uint32_t incarnation) {
        self->state.forks->peer_rejoined(rank);
        re_register_all(self, rank, incarnation);
      },
      [self](ReRegistered& r) { on_re_registered(self, std::move(r)); },
      [](Deadline& d) { d.fire(); },
      [self](shutdown_atom) { release_all(self); },
      [self](retry_atom) { retry_due(self); },
      [self](owner_gone_atom, RRefId id) { on_owner_gone(self, id); },
      [self](create_by_atom, RRefId id, int64_t limit_ms) { on_creation_due(self, id, limit_ms); },
  };
}

}  // namespace

rref_context_actor spawn_rref_context(RRefRuntime* rr) {
  // lazy_init: its first message starts it, on the thread that delivers it.
  return rr->services().system().spawn<caf::lazy_init>(context_behavior, rr);
}

}  // namespace castor::detail
