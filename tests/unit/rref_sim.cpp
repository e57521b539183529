// The simulated world of rref_sim.hpp. Each handler below names the RRef
// context's handler it mirrors; the decisions are the protocol classes'.
#include "rref_sim.hpp"

#include <algorithm>
#include <limits>
#include <sstream>

namespace castor::test::rref_sim {

using namespace castor::detail;

namespace {
constexpr int kTickMs = 25;  // RetryPolicy's default tick
}

Sim::Sim(int workers, uint64_t seed, Faults faults) : rng_(seed), faults_(faults) {
  for (int i = 0; i < workers; ++i) {
    auto w = std::make_unique<Worker>();
    w->rank = WorkerId(i);
    w->forks = std::make_unique<ForkTable>(w->rank, w->counters.pending_users, w->counters.pending_children);
    w->outbox = std::make_unique<Outbox>(w->rank, w->counters.outbox);
    workers_.push_back(std::move(w));
  }
}

Sim::~Sim() {
  tearing_down_ = true;
  handles_.clear();
  in_flight_.clear();
}

Outbox::time_point Sim::clock() const { return Outbox::time_point{} + std::chrono::milliseconds(now_); }

void Sim::violation(std::string what) {
  violations_.push_back("t=" + std::to_string(now_) + "ms: " + std::move(what));
}

// -- states and handles ------------------------------------------------------------------

RRefStatePtr Sim::track(Worker& w, RRefState* raw) {
  // The state's end is the StateDropped the RRef context gets from
  // ~RRefState in production (the simulated states have no runtime).
  auto rank = w.rank;
  RRefStatePtr s(raw, [this, rank](RRefState* p) {
    if (!tearing_down_) {
      auto& here = *workers_[size_t(rank)];
      if (here.alive && !p->released.load()) here.dropped.push_back(Dropped{p->id, p->fork, p->owner, p->is_owner()});
    }
    delete p;
  });
  w.states.push_back(s);
  return s;
}

RRefStatePtr Sim::new_user_state(Worker& w, RRefId id, WorkerId owner, ForkId fork) {
  auto* s = new RRefState();
  s->id = id;
  s->owner = owner;
  s->fork = fork;
  return track(w, s);
}

RRefStatePtr Sim::new_owner_state(Worker& w, RRefId id) {
  auto* s = new RRefState();
  s->id = id;
  s->owner = w.rank;
  s->holder = std::make_shared<Holder>();
  s->confirmed = true;
  return track(w, s);
}

Handle Sim::new_handle(WorkerId w, RRefId id, WorkerId owner) {
  HandleSlot slot;
  slot.worker = w;
  slot.rref = id;
  slot.owner = owner;
  handles_.push_back(std::move(slot));
  return handles_.size() - 1;
}

// -- the program --------------------------------------------------------------------------

Handle Sim::make_rref(WorkerId on) {
  auto& w = *workers_[size_t(on)];
  RRefId id(on, w.next_rref++);
  // As the context's OwnerRegistration: the owner, one local handle, created.
  owner_slot(w, id, true);
  to_owner(w, OwnerEvent::local_ref(id, +1, false));
  to_owner(w, OwnerEvent::created(id, ForkId{}, -1));
  auto h = new_handle(on, id, on);
  handles_[h].state = new_owner_state(w, id);
  handles_[h].arrived = handles_[h].ran = handles_[h].confirmed_when_ran = true;
  settle();
  return h;
}

Handle Sim::remote(WorkerId caller, WorkerId owner) {
  if (caller == owner) return make_rref(caller);
  auto& w = *workers_[size_t(caller)];
  RRefId id(caller, w.next_rref++);
  ForkId fork(caller, w.next_fork++);
  // As start_remote: the caller's fork, counted by the owner with the request.
  auto h = new_handle(caller, id, owner);
  handles_[h].state = new_user_state(w, id, owner, fork);
  handles_[h].arrived = handles_[h].ran = true;
  Message m;
  m.kind = Message::Kind::call;
  m.from = caller;
  m.to = owner;
  m.fork = RRefForkData{owner, id, fork, caller, "double"};
  m.creates = true;
  post(std::move(m));
  settle();
  return h;
}

Handle Sim::share(Handle h, WorkerId to) { return pass(h, to, false); }
Handle Sim::borrow(Handle h, WorkerId to) { return pass(h, to, true); }

Handle Sim::pass(Handle h, WorkerId to, bool borrows) {
  auto& from_slot = handles_.at(h);
  auto state = from_slot.state;
  auto& w = *workers_[size_t(from_slot.worker)];
  auto out = new_handle(to, from_slot.rref, from_slot.owner);
  // Nothing to pass, or (as start_call) a destination known dead: the call
  // fails before any fork is made.
  if (!state || !w.alive || w.known_dead.count(to)) {
    handles_[out].failed = handles_[out].arrived = true;
    return out;
  }
  if (to == w.rank) {  // a call to ourselves passes the handle itself
    handles_[out].state = state;
    handles_[out].arrived = handles_[out].ran = handles_[out].confirmed_when_ran = true;
    return out;
  }
  // As RRefRuntime::fork_for and the context's ForkRegistration: the fork is
  // registered before the message carrying it leaves.
  ForkId fork(w.rank, w.next_fork++);
  if (auto e = w.forks->fork_registered(state, fork, to)) to_owner(w, *e);
  Message m;
  m.kind = Message::Kind::call;
  m.from = w.rank;
  m.to = to;
  m.fork = RRefForkData{state->owner, state->id, fork, w.rank, "double"};
  m.slot = out;
  m.borrows = borrows;
  post(std::move(m));
  settle();
  return out;
}

void Sim::drop(Handle h) {
  auto& slot = handles_.at(h);
  slot.drop_requested = true;
  if (slot.ran || slot.failed) slot.state.reset();
  settle();
}

void Sim::kill(WorkerId dead, int detect_after_ms) {
  auto& w = *workers_[size_t(dead)];
  w.alive = false;
  for (auto& slot : handles_)
    if (slot.worker == dead) slot.state.reset();  // gone with the process, nothing sent
  timers_.emplace(now_ + detect_after_ms, [this, dead] {
    for (auto& w : workers_)
      if (w->alive) on_peer_down(*w, dead);
  });
}

// -- the network -----------------------------------------------------------------------------

std::string Sim::kind_name(const Message& m) const {
  switch (m.kind) {
    case Message::Kind::control:
      return to_string(m.control.op);
    case Message::Kind::ack:
      return "ack";
    case Message::Kind::call:
      return m.creates ? "create" : "call";
    case Message::Kind::fetch:
      return "fetch";
    case Message::Kind::value:
      return "value";
  }
  return "";
}

Rule* Sim::rule_for(const Message& m) {
  auto name = kind_name(m);
  for (auto& r : rules_) {
    if (r.from >= 0 && r.from != m.from) continue;
    bool control = m.kind == Message::Kind::control || m.kind == Message::Kind::ack;
    if (r.message == name || (r.message == "*" && control)) return &r;
  }
  return nullptr;
}

void Sim::post(Message m) {
  ++stats_.sent;
  ++sent_by_kind_[kind_name(m)];
  bool control = m.kind == Message::Kind::control || m.kind == Message::Kind::ack;
  int copies = 1, gap = 0, delay = 0;
  if (auto* r = rule_for(m)) {
    if (r->seen++ < r->drop_first) {
      ++stats_.dropped;
      return;
    }
    copies = r->copies;
    gap = r->copy_gap_ms;
    delay = r->delay_ms;
  }
  std::uniform_real_distribution<double> coin(0, 1);
  if (control && faults_.drop > 0 && coin(rng_) < faults_.drop) {
    ++stats_.dropped;
    return;
  }
  if (control && faults_.duplicate > 0 && coin(rng_) < faults_.duplicate) ++copies;
  if (copies > 1) stats_.duplicated += copies - 1;
  std::uniform_int_distribution<int> jitter(faults_.min_delay_ms, std::max(faults_.min_delay_ms, faults_.max_delay_ms));
  for (int i = 0; i < copies; ++i) {
    int64_t at = now_ + delay + i * gap + jitter(rng_);
    in_flight_.emplace(std::make_pair(at, seq_++), m);
  }
}

void Sim::deliver(Message& m) {
  auto& w = *workers_[size_t(m.to)];
  if (!w.alive) return;  // lost with the process
  // The link to a worker known dead is gone: what it sent is lost with it.
  if (w.known_dead.count(m.from)) return;
  ++stats_.delivered;
  switch (m.kind) {
    case Message::Kind::control:
      return on_control(w, m.control);
    case Message::Kind::ack:
      return on_ack(w, m.ack);
    case Message::Kind::call:
      return on_call(w, m);
    case Message::Kind::fetch:
      return on_fetch(w, m);
    case Message::Kind::value:
      return on_value(w, m);
  }
}

// -- the handlers (the RRef context's, see rref_context.cpp) -----------------------------------------

// send_control: through the outbox, unless the destination is known dead.
void Sim::send_control(Worker& w, const ControlToSend& c) {
  if (c.to < 0 || w.known_dead.count(c.to)) return;
  transmit(w, w.outbox->post(c, clock()));
}

void Sim::transmit(Worker& w, const Transmission& t) {
  Message m;
  m.kind = Message::Kind::control;
  m.from = w.rank;
  m.to = t.to;
  m.control = t.msg;
  post(std::move(m));
}

// owner_slot: find, or make unless ended.
Sim::SimOwner* Sim::owner_slot(Worker& w, RRefId id, bool make) {
  if (!make) return w.owners.find(id);
  return w.owners.find_or_make(id, [&] {
    if (w.ended.count(id)) violation("worker " + std::to_string(w.rank) + " made " + to_string(id) + " again after it ended");
    SimOwner o;
    o.stats = std::make_shared<OwnerStats>();
    o.forks = std::make_unique<OwnerForks>(id.worker(), w.counters.forks, o.stats->forks);
    // As owner_slot does: an owner made after its creator's death hears of it.
    if (w.forks->is_dead(id.worker()) &&
        o.forks->apply(OwnerEvent::peer_down(id, id.worker())) == OwnerForks::Outcome::creator_died)
      o.creator_died = true;
    return o;
  });
}

// to_owner, with the event applied at once, as the context applies it to
// its slot (Note [Light owners]) or an owner actor's mailbox takes the
// context's events in the order sent.
bool Sim::to_owner(Worker& w, const OwnerEvent& e) {
  auto* o = owner_slot(w, e.rref, e.may_make_owner);
  if (!o) return false;
  if (o->forks->apply(e) == OwnerForks::Outcome::creator_died) o->creator_died = true;
  maybe_end(w, e.rref);
  return true;
}

// The owner actor's maybe_end (no method calls here), then the context's owner_gone.
void Sim::maybe_end(Worker& w, RRefId id) {
  auto* o = w.owners.find(id);
  if (!o || !o->forks->may_end()) return;
  std::string where;
  if (live_fork_exists(id, where)) violation(to_string(id) + " ended while a fork of it is alive: " + where);
  w.owners.ended(id, clock());
  w.ended.insert(id);
}

bool Sim::live_fork_exists(RRefId id, std::string& where) const {
  for (auto& w : workers_) {
    if (!w->alive) continue;  // a dead worker's forks count as deleted
    for (auto& weak : w->states) {
      auto s = weak.lock();
      if (s && s->id == id && !s->released.load()) {
        where = "a handle on worker " + std::to_string(w->rank);
        return true;
      }
    }
  }
  for (auto& [key, m] : in_flight_) {
    if (m.kind == Message::Kind::call && !m.creates && m.fork.rref_id == id && workers_[size_t(m.to)]->alive &&
        workers_[size_t(m.from)]->alive) {
      where = "a call on its way to worker " + std::to_string(m.to);
      return true;
    }
  }
  return false;
}

// on_control: the owner counts, the parent releases; always acknowledged.
void Sim::on_control(Worker& w, const RRefControl& msg) {
  if (auto e = w.forks->control_received(msg)) to_owner(w, *e);
  if (w.known_dead.count(msg.id.worker())) return;
  Message ack;
  ack.kind = Message::Kind::ack;
  ack.from = w.rank;
  ack.to = msg.id.worker();
  ack.ack = RRefControlAck{msg.id};
  post(std::move(ack));
}

// on_ack: the outbox forgets it; a fork_request's ack confirms the fork.
void Sim::on_ack(Worker& w, const RRefControlAck& ack) {
  auto acked = w.outbox->acknowledge(ack.id);
  if (!acked) return;
  auto confirmed = w.forks->acknowledged(*acked);
  if (!confirmed) return;
  send_control(w, confirmed->release_parent);
  for (auto call : confirmed->calls) call_done(w, call, false);
}

// A call arrived: remote()'s creation (remote_calls.cpp's create_result_slot),
// or a function that keeps the fork it got (adoption.cpp, then call
// preparation: it runs once the fork is usable).
void Sim::on_call(Worker& w, const Message& m) {
  const auto& d = m.fork;
  if (m.creates) {
    to_owner(w, OwnerEvent::created(d.rref_id, d.fork_id, m.from));
    return;
  }
  if (m.borrows && borrow_on_arrival(w, m)) return;
  auto call = w.next_call++;
  auto& pending = w.calls[call];
  pending.handle = m.slot;
  RRefStatePtr state;
  switch (w.forks->arrival_of(d)) {
    case Arrival::at_owner: {
      auto arrived = w.forks->arrived_at_owner(d);
      if (!to_owner(w, arrived.local_ref)) violation("a fork of " + to_string(d.rref_id) + " reached its owner after it ended");
      state = new_owner_state(w, d.rref_id);
      if (arrived.release_parent) send_control(w, *arrived.release_parent);
      break;
    }
    case Arrival::from_owner:
      state = new_user_state(w, d.rref_id, d.owner, d.fork_id);
      w.forks->arrived_from_owner(*state);
      break;
    case Arrival::from_user:
      state = new_user_state(w, d.rref_id, d.owner, d.fork_id);
      ++pending.outstanding;
      auto arrived = w.forks->arrived_from_user(state, d.parent, call);
      if (arrived.fork_request) send_control(w, *arrived.fork_request);
      if (arrived.owner_dead) {  // as fork_lost_for does: this wait is over, and the call fails
        pending.failed = true;
        --pending.outstanding;
      }
      break;
  }
  handles_[m.slot].state = std::move(state);  // the call's argument, until the function has it
  handles_[m.slot].arrived = true;
  run_if_ready(w, call);
}

// call_preparation.cpp's borrow_argument: a fork from a user, taken by value,
// is fetched with no fork here (G3).
bool Sim::borrow_on_arrival(Worker& w, const Message& m) {
  auto release = w.forks->borrowed(m.fork);
  if (!release) return false;
  auto call = w.next_call++;
  auto& pending = w.calls[call];
  pending.handle = m.slot;
  pending.outstanding = 1;
  pending.release = release;
  pending.borrowed = m.fork;
  handles_[m.slot].arrived = true;
  Message f;
  f.kind = Message::Kind::fetch;
  f.from = w.rank;
  f.to = m.fork.owner;
  f.fork = m.fork;
  f.call = call;
  post(std::move(f));
  return true;
}

// remote_calls.cpp's fetch: the slot is made if the fetch came first, and
// the answer waits until the value is created (here: the fetch is looked at
// again a millisecond later).
void Sim::on_fetch(Worker& w, const Message& m) {
  const auto& d = m.fork;
  auto answer = [&](bool ok) {
    Message v;
    v.kind = Message::Kind::value;
    v.from = w.rank;
    v.to = m.from;
    v.fork = d;
    v.call = m.call;
    v.ok = ok;
    post(std::move(v));
  };
  if (w.ended.count(d.rref_id)) {
    // G3: the parent's pending child keeps the value until the borrower's
    // child_accept, which leaves only with this answer.
    if (workers_[size_t(d.parent)]->alive && workers_[size_t(m.from)]->alive)
      violation("a borrowed fetch of " + to_string(d.rref_id) + " found it ended while its parent, worker " +
                std::to_string(d.parent) + ", lives");
    return answer(false);
  }
  auto* o = owner_slot(w, d.rref_id, true);
  if (!o || o->creator_died) return answer(false);
  if (!o->forks->is_created()) {
    in_flight_.emplace(std::make_pair(now_ + 1, seq_++), m);
    return;
  }
  answer(true);
}

// on_argument_ready: the borrow is over (child_accept to the parent), then
// the call runs or fails; once per borrow.
void Sim::end_borrow(Worker& w, PreparedCallId call, bool failed) {
  auto it = w.calls.find(call);
  if (it == w.calls.end() || !it->second.release) return;
  send_control(w, *it->second.release);
  it->second.release.reset();
  call_done(w, call, failed);
}

void Sim::on_value(Worker& w, const Message& m) { end_borrow(w, m.call, !m.ok); }

// PreparedCalls::done: one wait is over (or failed).
void Sim::call_done(Worker& w, PreparedCallId call, bool failed) {
  auto it = w.calls.find(call);
  if (it == w.calls.end()) return;
  it->second.failed |= failed;
  --it->second.outstanding;
  run_if_ready(w, call);
}

// The call runs (or fails) once it waits for nothing more.
void Sim::run_if_ready(Worker& w, PreparedCallId call) {
  auto it = w.calls.find(call);
  if (it == w.calls.end() || it->second.outstanding > 0) return;
  auto pending = it->second;
  w.calls.erase(it);
  auto& slot = handles_[pending.handle];
  if (pending.failed) {
    slot.failed = true;
    slot.state.reset();
    return;
  }
  slot.ran = true;
  if (pending.borrowed.rref_id.valid()) {  // G3: the function has the value, no fork here
    auto& owner = *workers_[size_t(slot.owner)];
    if (owner.alive && owner.ended.count(slot.rref) && workers_[size_t(pending.borrowed.parent)]->alive)
      violation("a call on worker " + std::to_string(w.rank) + " borrowed " + to_string(slot.rref) + ", which had ended");
    return;
  }
  slot.confirmed_when_ran = slot.state && slot.state->confirmed.load();
  if (!slot.confirmed_when_ran) violation("a call on worker " + std::to_string(w.rank) + " ran with an unconfirmed fork");
  auto& owner = *workers_[size_t(slot.owner)];
  if (owner.alive && owner.ended.count(slot.rref))
    violation("a call on worker " + std::to_string(w.rank) + " got " + to_string(slot.rref) + ", which had ended");
  if (slot.drop_requested) slot.state.reset();
}

// on_dropped / release_all: the last handle here is gone.
void Sim::on_dropped(Worker& w, const Dropped& d) { release(w, w.forks->released(d.rref, d.fork, d.owner, d.owner_side)); }

void Sim::release(Worker& w, const Released& r) {
  if (r.owner) to_owner(w, *r.owner);
  if (r.send) send_control(w, *r.send);
}

// on_peer_down: the outbox, the fork table, then every owner here.
void Sim::on_peer_down(Worker& w, WorkerId rank) {
  w.known_dead.insert(rank);
  w.outbox->peer_down(rank);
  for (auto call : w.forks->peer_down(rank)) call_done(w, call, true);
  // A borrowed fork's fetch to a dead owner fails (start_call's peer death):
  // its child_accept leaves as with any answer.
  std::vector<PreparedCallId> lost;
  for (auto& [id, pc] : w.calls)
    if (pc.release && pc.borrowed.owner == rank) lost.push_back(id);
  for (auto id : lost) end_borrow(w, id, true);
  std::vector<RRefId> ids;
  w.owners.for_each([&](RRefId id, SimOwner&) { ids.push_back(id); });
  for (auto id : ids) to_owner(w, OwnerEvent::peer_down(id, rank));
}

void Sim::settle() {
  bool any = true;
  while (any) {
    any = false;
    for (auto& w : workers_) {
      while (w->alive && !w->dropped.empty()) {
        auto d = w->dropped.front();
        w->dropped.pop_front();
        on_dropped(*w, d);
        any = true;
      }
    }
  }
}

// -- running ------------------------------------------------------------------------------------------

bool Sim::quiet() const {
  if (!in_flight_.empty() || !timers_.empty()) return false;
  for (auto& w : workers_)
    if (w->alive && (!w->outbox->empty() || !w->dropped.empty())) return false;
  return true;
}

void Sim::step_to(int64_t until) {
  settle();
  constexpr auto never = std::numeric_limits<int64_t>::max();
  while (true) {
    int64_t next_msg = in_flight_.empty() ? never : in_flight_.begin()->first.first;
    int64_t next_timer = timers_.empty() ? never : timers_.begin()->first;
    int64_t t = std::min({next_msg, next_timer, next_tick_});
    if (t > until) break;
    now_ = t;
    if (t == next_msg) {
      auto m = std::move(in_flight_.begin()->second);
      in_flight_.erase(in_flight_.begin());
      deliver(m);
    } else if (t == next_timer) {
      auto f = std::move(timers_.begin()->second);
      timers_.erase(timers_.begin());
      f();
    } else {
      // The context's retry_atom: resend what is due.
      next_tick_ += kTickMs;
      for (auto& w : workers_) {
        if (!w->alive) continue;
        for (auto& t : w->outbox->due(clock())) {
          ++stats_.resent;
          transmit(*w, t);
        }
      }
    }
    settle();
  }
  now_ = until;
}

void Sim::run_for(int ms) { step_to(now_ + ms); }

void Sim::run_until_arrived(Handle h, int max_ms) {
  auto end = now_ + max_ms;
  while (!handles_.at(h).arrived && !handles_.at(h).failed && now_ < end) step_to(now_ + 1);
}

bool Sim::run_until_quiet(int max_ms) {
  auto end = now_ + max_ms;
  settle();
  while (!quiet() && now_ < end) step_to(std::min<int64_t>(end, now_ + 10));
  return quiet();
}

// -- what happened ------------------------------------------------------------------------------------------

bool Sim::ended(Handle h) const {
  auto& slot = handles_.at(h);
  return workers_[size_t(slot.owner)]->ended.count(slot.rref) > 0;
}

const OwnerForks* Sim::owner_forks(Handle h) {
  auto& slot = handles_.at(h);
  auto* o = workers_[size_t(slot.owner)]->owners.find(slot.rref);
  return o ? o->forks.get() : nullptr;
}

bool Sim::creator_died(Handle h) const {
  auto& slot = handles_.at(h);
  auto& w = *workers_[size_t(slot.owner)];
  auto* o = const_cast<OwnerDirectory<SimOwner>&>(w.owners).find(slot.rref);
  return o && o->creator_died;
}

std::string Sim::leftovers() const {
  std::ostringstream out;
  for (auto& w : workers_) {
    if (!w->alive) continue;
    auto r = std::to_string(w->rank);
    const auto& c = w->counters;
    w->owners.for_each([&](RRefId id, const SimOwner& o) {
      out << "worker " << r << ": owner of " << to_string(id) << " (forks " << o.forks->forks() << ", local refs "
          << o.forks->local_refs() << (o.forks->is_created() ? ", created" : ", not created")
          << (o.creator_died ? ", creator died" : "") << "); ";
    });
    if (w->forks->pending_users()) out << "worker " << r << ": " << w->forks->pending_users() << " pending users; ";
    if (w->forks->pending_children())
      out << "worker " << r << ": " << w->forks->pending_children() << " pending children; ";
    if (!w->outbox->empty()) out << "worker " << r << ": " << w->outbox->size() << " unacked; ";
    if (!w->calls.empty()) out << "worker " << r << ": " << w->calls.size() << " calls waiting; ";
    if (c.pending_users.load() != int64_t(w->forks->pending_users()) ||
        c.pending_children.load() != int64_t(w->forks->pending_children()) ||
        c.outbox.load() != int64_t(w->outbox->size()) || c.forks.load() != 0)
      out << "worker " << r << ": gauges disagree; ";
  }
  return out.str();
}

}  // namespace castor::test::rref_sim
