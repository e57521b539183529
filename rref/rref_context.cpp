// The RRef context actor (see Note [RRef protocol] in rref_context.hpp) and the
// thread-safe entry points of RRefRuntime.
#include "rref/rref_context.hpp"

#include <unordered_map>
#include <unordered_set>

#include <caf/io/middleman.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/hooks/worker_services.hpp"
#include "rref/class_registry.hpp"
#include "rref/owner_rref_actor.hpp"

namespace castor::detail {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kRetryFirst = std::chrono::milliseconds(50);
constexpr auto kRetryMax = std::chrono::milliseconds(2000);
constexpr auto kRetryTick = std::chrono::milliseconds(25);

template <class List>
struct context_broker_of;
template <class... Sigs>
struct context_broker_of<caf::detail::type_list<Sigs...>> {
  using type = caf::io::typed_broker<Sigs...>;
};
using context_broker = context_broker_of<rref_context_actor::signatures>::type;

struct OwnerSlot {
  owner_rref_actor actor;
  std::shared_ptr<Holder> holder;
};

struct PendingUser {
  RRefStatePtr state;              // kept alive until the owner confirms the fork
  WorkerId parent = -1;            // told with child_accept once confirmed
  std::vector<uint64_t> waiting;   // prepared calls that start only when confirmed
};

struct PendingChild {
  RRefStatePtr state;  // G2: our fork stays alive until the child is confirmed
  WorkerId child = -1;
};

struct OutboxEntry {
  WorkerId to = -1;
  RRefControl msg;
  int attempts = 0;
  Clock::time_point next;
};

struct PreparedCall {
  IncomingCall call;
  int outstanding = 0;  // forks to confirm and values to fetch before it runs
  std::optional<ErrorInfo> failure;
};

struct context_state {
  static inline const char* name = "castor.rref_context";

  RRefRuntime* rr = nullptr;
  WorkerServices* rt = nullptr;

  // Owners on this worker, by rref id; `ended` remembers the ones that ended
  // so that a late or repeated message never revives them.
  std::unordered_map<RRefId, OwnerSlot> owners;
  std::unordered_set<RRefId> ended;

  // Forks here that the owner has not confirmed yet (user -> user sharing).
  std::unordered_map<ForkId, PendingUser> pending_users;
  // Forks we gave away to a non-owner, not yet confirmed by the owner (G2).
  std::unordered_map<ForkId, PendingChild> pending_children;

  // Control messages awaiting their ack, resent with backoff.
  std::unordered_map<ControlId, OutboxEntry> outbox;
  IdGenerator<ControlId> control_ids;
  bool retry_scheduled = false;

  // Incoming calls waiting for forks to be confirmed or values to arrive.
  std::unordered_map<uint64_t, PreparedCall> prepared;
  uint64_t next_prepared = 1;
};

using context_pointer = caf::stateful_actor<context_state, context_broker>*;

// -- control messages -------------------------------------------------------------

void transmit(context_pointer self, WorkerId to, const RRefControl& msg) {
  auto peer = self->state.rt->world().peer(to);
  if (!peer) return;  // dead: on_peer_down drops what was meant for it
  auto plan = self->state.rr->faults().decide(to_string(msg.op));
  if (plan.drop) return;  // fault injection: the retry will resend it
  for (int i = 0; i < plan.copies; ++i) {
    if (plan.delay.count() > 0)
      self->delayed_send(*peer, plan.delay, msg);
    else
      self->send(*peer, msg);
  }
}

void schedule_retry(context_pointer self) {
  auto& st = self->state;
  if (st.retry_scheduled || st.outbox.empty()) return;
  st.retry_scheduled = true;
  self->delayed_send(self, kRetryTick, retry_atom::value);
}

void send_control(context_pointer self, RRefOp op, WorkerId to, RRefId rref, ForkId fork) {
  auto& st = self->state;
  const auto& world = st.rt->world();
  if (to < 0 || (world.has(to) && !world.alive(to))) return;  // a dead peer needs no news
  RRefControl msg{st.control_ids.next(), op, rref, fork, st.rt->rank()};
  st.outbox.emplace(msg.id, OutboxEntry{to, msg, 0, Clock::now() + kRetryFirst});
  st.rr->counters().outbox.fetch_add(1);
  transmit(self, to, msg);
  schedule_retry(self);
}

void retry_due(context_pointer self) {
  auto& st = self->state;
  st.retry_scheduled = false;
  auto now = Clock::now();
  for (auto& [id, e] : st.outbox) {
    if (e.next > now) continue;
    ++e.attempts;
    e.next = now + std::min<Clock::duration>(kRetryFirst * (1 << std::min(e.attempts, 5)), kRetryMax);
    transmit(self, e.to, e.msg);
  }
  schedule_retry(self);
}

void send_ack(context_pointer self, const RRefControl& msg) {
  auto peer = self->state.rt->world().peer(msg.id.worker());
  if (!peer) return;
  auto plan = self->state.rr->faults().decide("ack");
  if (plan.drop) return;
  for (int i = 0; i < plan.copies; ++i) {
    if (plan.delay.count() > 0)
      self->delayed_send(*peer, plan.delay, RRefControlAck{msg.id});
    else
      self->send(*peer, RRefControlAck{msg.id});
  }
}

// -- owners ---------------------------------------------------------------------------

OwnerSlot* owner_slot(context_pointer self, RRefId id, bool create, std::shared_ptr<Holder> holder = nullptr) {
  auto& st = self->state;
  auto it = st.owners.find(id);
  if (it != st.owners.end()) return &it->second;
  if (!create || st.ended.count(id)) return nullptr;
  if (!holder) holder = std::make_shared<Holder>();
  auto me = caf::actor_cast<rref_context_actor>(self);
  auto stats = std::make_shared<OwnerStats>();
  auto actor = spawn_owner_rref(*st.rt, id, holder, stats, [me, id] { caf::anon_send(me, owner_gone_atom::value, id); });
  self->link_to(actor);  // owners end with the context (teardown)
  st.rr->owner_added(id, holder, std::move(stats));
  return &st.owners.emplace(id, OwnerSlot{actor, holder}).first->second;
}

ErrorInfo gone_error(context_pointer self, RRefId id) {
  auto* rt = self->state.rt;
  return make_error(ErrorKind::Lookup, rt->name(),
                    "worker " + rt->name() + ": RRef " + to_string(id) + " no longer exists here (every fork was deleted)");
}

// -- adoption: forks that arrive become local references ----------------------------

void adopt_value(context_pointer self, Value& v, uint64_t waiting_call) {
  auto& st = self->state;
  auto* rt = st.rt;
  v.for_each_rref([&](RRefValue& rv) {
    if (rv.handle) return;  // already local (a call to ourselves)
    const auto& d = rv.data;
    if (d.owner == rt->rank()) {
      // Shared with the owner: it does not count this fork, it uses its own
      // OwnerRRef, and releases the parent's pending child.
      auto* slot = owner_slot(self, d.rref_id, true);
      std::shared_ptr<Holder> holder;
      if (slot) {
        holder = slot->holder;
        self->send(slot->actor, local_ref_atom::value, int32_t(1));
      } else {
        holder = std::make_shared<Holder>();
        holder->set_error(gone_error(self, d.rref_id));
      }
      rv.handle = st.rr->new_owner_state(d.rref_id, holder, d.type_name);
      if (d.parent != rt->rank()) send_control(self, RRefOp::child_accept, d.parent, d.rref_id, d.fork_id);
      return;
    }
    auto state = st.rr->new_user_state(d.rref_id, d.owner, d.fork_id, d.type_name);
    rv.handle = state;
    if (d.parent == d.owner) {
      state->confirmed = true;  // the owner counted this fork before sending it
      return;
    }
    // User to user: ask the owner to count our fork; tell the parent after.
    auto& pu = st.pending_users[d.fork_id];
    pu.state = state;
    pu.parent = d.parent;
    if (waiting_call) {
      pu.waiting.push_back(waiting_call);
      st.prepared[waiting_call].outstanding++;
    }
    st.rr->counters().pending_users.fetch_add(1);
    send_control(self, RRefOp::fork_request, d.owner, d.rref_id, d.fork_id);
  });
}

// -- incoming calls ---------------------------------------------------------------------

// Which parameters take an RRef, for the function or method `req` names.
std::vector<bool> rref_params(context_pointer self, const CallRequest& req, const std::vector<Value>& args) {
  std::vector<bool> out(args.size(), false);
  const std::vector<ParamInfo>* params = nullptr;
  if (req.kind == CallKind::function) {
    if (auto* e = FunctionRegistry::instance().find(req.function)) params = &e->params;
  } else if (req.kind == CallKind::method) {
    auto it = self->state.owners.find(req.target);
    if (it != self->state.owners.end() && it->second.holder->is_set() && it->second.holder->cls())
      if (auto* m = it->second.holder->cls()->method(req.function)) params = &m->params;
  }
  // Unknown targets (a builtin, a method whose object is not there yet): a
  // by-value parameter is the safe reading, resolved like the RFC says.
  if (params)
    for (size_t i = 0; i < out.size() && i < params->size(); ++i) out[i] = (*params)[i].is_rref;
  return out;
}

void dispatch(context_pointer self, IncomingCall&& ic);

void maybe_run(context_pointer self, uint64_t id) {
  auto& st = self->state;
  auto it = st.prepared.find(id);
  if (it == st.prepared.end() || it->second.outstanding > 0) return;
  auto p = std::move(it->second);
  st.prepared.erase(it);
  if (p.failure) {
    st.rt->replier(p.call.reply_to, p.call.request)(Outcome::failure(std::move(*p.failure)));
    return;
  }
  dispatch(self, std::move(p.call));
}

// An RRef passed where the callee takes the value: fetch it (from ourselves
// when we own it; otherwise the owner sends it straight here) before running.
void resolve_argument(context_pointer self, uint64_t id, size_t index) {
  auto& st = self->state;
  auto& p = st.prepared[id];
  auto state = state_of(p.call.request.args[index].to_rref_value());
  p.outstanding++;
  auto me = caf::actor_cast<rref_context_actor>(self);
  if (state->is_owner()) {
    // On the owner the function gets the stored value itself, as local_value()
    // would: a parameter passed this way stays the leaf its gradients reach.
    auto holder = state->holder;
    holder->on_set([me, id, index, holder] {
      if (auto err = holder->error())
        caf::anon_send(me, ArgumentReady{id, index, Outcome::failure(*err)});
      else
        caf::anon_send(me, ArgumentReady{id, index, Outcome::success(holder->value())});
    });
    return;
  }
  CallRequest fetch;
  fetch.id = st.rt->next_call_id();
  fetch.caller = st.rt->rank();
  fetch.function = "to_here";
  fetch.kind = CallKind::fetch;
  fetch.target = state->id;
  fetch.autograd.context = p.call.request.autograd.context;  // the value joins the call's graph
  st.rt->start_call(state->owner, std::move(fetch), st.rt->options().rpc_timeout,
                    [me, id, index](Outcome o) { caf::anon_send(me, ArgumentReady{id, index, std::move(o)}); });
}

void on_argument_ready(context_pointer self, ArgumentReady&& r) {
  auto& st = self->state;
  auto it = st.prepared.find(r.call);
  if (it == st.prepared.end()) return;
  auto& p = it->second;
  if (r.outcome.ok) {
    p.call.request.args[r.index] = std::move(r.outcome.value);
    adopt_value(self, p.call.request.args[r.index], r.call);  // the fetched value may hold RRefs too
  } else if (!p.failure) {
    p.failure = make_error(r.outcome.error.kind, st.rt->name(),
                           "worker " + st.rt->name() + ": argument " + std::to_string(r.index + 1) + " of '" +
                               p.call.request.function + "' (an RRef) could not be fetched: " + r.outcome.error.message);
  }
  p.outstanding--;
  maybe_run(self, r.call);
}

void handle_incoming(context_pointer self, IncomingCall&& ic) {
  auto& st = self->state;
  auto id = st.next_prepared++;
  auto& p = st.prepared[id];
  p.call = std::move(ic);
  auto& args = p.call.request.args;
  for (auto& a : args) adopt_value(self, a, id);
  auto takes_rref = rref_params(self, p.call.request, args);
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].is_rref() && !takes_rref[i]) resolve_argument(self, id, i);
  maybe_run(self, id);
}

// remote(): count the creator's fork and hand out the new value's slot.
std::shared_ptr<Holder> create_result_slot(context_pointer self, const CallRequest& req) {
  auto* slot = owner_slot(self, req.result_to.rref_id, true);
  if (!slot) return nullptr;
  if (req.result_to.fork_id.valid()) self->send(slot->actor, add_fork_atom::value, req.result_to.fork_id, req.caller);
  self->send(slot->actor, created_atom::value);
  return slot->holder;
}

void run_constructor(WorkerServices* rt, const ClassEntry* cls, std::vector<Value>&& args, std::shared_ptr<Holder> holder,
                     Completion ack) {
  bool accepted = rt->post([rt, cls, args = std::move(args), holder, ack]() mutable {
    try {
      holder->set_object(cls->construct(std::move(args)), cls);
    } catch (const CallFailure& f) {
      holder->set_error(make_error(f.kind, rt->name(), "worker " + rt->name() + ": " + f.message));
    } catch (const std::exception& e) {
      holder->set_error(make_error(ErrorKind::Remote, rt->name(),
                                   "worker " + rt->name() + ": constructor of '" + cls->name + "' raised: " + e.what()));
    }
    ack(Outcome::success(Value()));
  });
  if (!accepted) {
    holder->set_error(make_error(ErrorKind::Remote, rt->name(), "worker " + rt->name() + ": executor saturated"));
    ack(Outcome::success(Value()));
  }
}

void dispatch(context_pointer self, IncomingCall&& ic) {
  auto& st = self->state;
  auto* rt = st.rt;
  auto& req = ic.request;
  auto reply = rt->replier(ic.reply_to, req);
  std::shared_ptr<Holder> result;
  if (req.is_remote()) {
    result = create_result_slot(self, req);
    if (!result) return reply(Outcome::failure(gone_error(self, req.result_to.rref_id)));
  }
  switch (req.kind) {
    case CallKind::function: {
      if (!result) return rt->execute(std::move(req), std::move(reply));
      if (auto* cls = ClassRegistry::instance().find(req.function))
        return run_constructor(rt, cls, std::move(req.args), result, std::move(reply));
      req.result_to = RRefForkData{};
      return rt->execute(std::move(req), [result, reply](Outcome o) {
        if (o.ok)
          result->set_value(std::move(o.value));
        else
          result->set_error(std::move(o.error));
        reply(Outcome::success(Value()));
      });
    }
    case CallKind::method:
    case CallKind::fetch: {
      // A call may overtake the remote() that creates its target: the slot
      // is made now and the call waits in the owner's mailbox for the value.
      auto* slot = owner_slot(self, req.target, true);
      if (!slot) return reply(Outcome::failure(gone_error(self, req.target)));
      self->send(slot->actor, OwnerCall{std::move(req), std::move(reply), result});
      return;
    }
  }
}

// -- control message handling --------------------------------------------------------

void handle_control(context_pointer self, RRefControl&& msg) {
  auto& st = self->state;
  switch (msg.op) {
    case RRefOp::fork_request:  // we own msg.rref: count the child's fork
      if (auto* slot = owner_slot(self, msg.rref, true))
        self->send(slot->actor, add_fork_atom::value, msg.fork, msg.holder);
      break;
    case RRefOp::child_accept:  // G2: the child is confirmed, our fork may go
      if (st.pending_children.erase(msg.fork)) st.rr->counters().pending_children.fetch_sub(1);
      break;
    case RRefOp::user_delete:  // G1: a fork is gone (maybe before its add arrives)
      if (auto* slot = owner_slot(self, msg.rref, true)) self->send(slot->actor, del_fork_atom::value, msg.fork);
      break;
  }
  send_ack(self, msg);
}

void handle_ack(context_pointer self, const RRefControlAck& ack) {
  auto& st = self->state;
  auto it = st.outbox.find(ack.id);
  if (it == st.outbox.end()) return;  // a duplicate ack
  auto msg = it->second.msg;
  st.outbox.erase(it);
  st.rr->counters().outbox.fetch_sub(1);
  if (msg.op != RRefOp::fork_request) return;
  // The owner confirmed our fork: tell the parent, then run what waited.
  auto pu = st.pending_users.find(msg.fork);
  if (pu == st.pending_users.end()) return;
  auto entry = std::move(pu->second);
  st.pending_users.erase(pu);
  st.rr->counters().pending_users.fetch_sub(1);
  entry.state->confirmed = true;
  send_control(self, RRefOp::child_accept, entry.parent, msg.rref, msg.fork);
  for (auto id : entry.waiting) {
    auto it2 = st.prepared.find(id);
    if (it2 == st.prepared.end()) continue;
    it2->second.outstanding--;
    maybe_run(self, id);
  }
}

void on_peer_down(context_pointer self, WorkerId rank) {
  auto& st = self->state;
  auto* rt = st.rt;
  for (auto it = st.outbox.begin(); it != st.outbox.end();) {
    if (it->second.to == rank) {
      it = st.outbox.erase(it);
      st.rr->counters().outbox.fetch_sub(1);
    } else {
      ++it;
    }
  }
  for (auto it = st.pending_children.begin(); it != st.pending_children.end();) {
    if (it->second.child == rank) {
      it = st.pending_children.erase(it);
      st.rr->counters().pending_children.fetch_sub(1);
    } else {
      ++it;
    }
  }
  for (auto it = st.pending_users.begin(); it != st.pending_users.end();) {
    if (it->second.state->owner != rank) {
      ++it;
      continue;
    }
    auto who = rt->name_of(rank);
    for (auto id : it->second.waiting) {
      auto p = st.prepared.find(id);
      if (p == st.prepared.end()) continue;
      if (!p->second.failure)
        p->second.failure = make_error(ErrorKind::Unreachable, who,
                                       "worker " + who + ", the owner of an RRef argument, is unreachable");
      p->second.outstanding--;
      maybe_run(self, id);
    }
    it = st.pending_users.erase(it);
    st.rr->counters().pending_users.fetch_sub(1);
  }
  for (auto& [id, slot] : st.owners) self->send(slot.actor, peer_down_atom::value, rank);
}

void release_all(context_pointer self) {
  auto& st = self->state;
  for (auto& s : st.rr->take_live_states()) {
    if (s->released.exchange(true)) continue;
    if (s->is_owner()) {
      if (auto* slot = owner_slot(self, s->id, false)) self->send(slot->actor, local_ref_atom::value, int32_t(-1));
    } else {
      send_control(self, RRefOp::user_delete, s->owner, s->id, s->fork);
    }
  }
}

void on_dropped(context_pointer self, const StateDropped& d) {
  if (d.owner_side) {
    if (auto* slot = owner_slot(self, d.rref, false)) self->send(slot->actor, local_ref_atom::value, int32_t(-1));
    return;
  }
  send_control(self, RRefOp::user_delete, d.owner, d.rref, d.fork);  // G1
}

void on_fork_registered(context_pointer self, ForkRegistration&& r) {
  auto& st = self->state;
  if (r.state->is_owner()) {
    // Owner -> user: count the fork before it can be used (or deleted).
    if (auto* slot = owner_slot(self, r.state->id, false))
      self->send(slot->actor, add_fork_atom::value, r.fork, r.to);
    return;
  }
  // G2: our state stays alive until the owner has confirmed the child.
  st.pending_children[r.fork] = PendingChild{std::move(r.state), r.to};
  st.rr->counters().pending_children.fetch_add(1);
}

rref_context_actor::behavior_type context_behavior(context_pointer self, RRefRuntime* rr) {
  self->state.rr = rr;
  self->state.rt = &rr->services();
  self->state.control_ids.reset(rr->services().rank());
  return {
      [self](RRefControl& msg) { handle_control(self, std::move(msg)); },
      [self](RRefControlAck& ack) { handle_ack(self, ack); },
      [self](IncomingCall& ic) { handle_incoming(self, std::move(ic)); },
      [self](ForkRegistration& r) { on_fork_registered(self, std::move(r)); },
      [self](StateDropped& d) { on_dropped(self, d); },
      [self](OwnerRegistration& r) {
        if (auto* slot = owner_slot(self, r.rref, true, r.holder)) {
          self->send(slot->actor, local_ref_atom::value, int32_t(1));
          self->send(slot->actor, created_atom::value);
        }
      },
      [self](AdoptReply& r) {
        adopt_value(self, r.value, 0);
        r.done(Outcome::success(std::move(r.value)));
      },
      [self](ArgumentReady& r) { on_argument_ready(self, std::move(r)); },
      [self](peer_down_atom, WorkerId rank) { on_peer_down(self, rank); },
      [self](shutdown_atom) { release_all(self); },
      [self](retry_atom) { retry_due(self); },
      [self](owner_gone_atom, RRefId id) {
        self->state.owners.erase(id);
        self->state.rr->owner_removed(id);
        self->state.ended.insert(id);
      },
  };
}

}  // namespace

// -- RRefRuntime ------------------------------------------------------------------------

RRefRuntime::RRefRuntime(WorkerServices& rt)
    : rref_ids(rt.rank()), fork_ids(rt.rank()), rt_(rt), counters_(std::make_shared<RRefCounters>()),
      faults_(rt.options().faults) {
  context_ = rt.system().middleman().spawn_broker(context_behavior, this);
}

RRefRuntime::~RRefRuntime() { stop(); }

void RRefRuntime::stop() {
  if (context_) caf::anon_send_exit(context_, caf::exit_reason::user_shutdown);
  context_ = nullptr;
}

void RRefRuntime::fork_for(Value& v, WorkerId to) {
  v.for_each_rref([&](RRefValue& rv) {
    auto s = state_of(rv);
    if (!s || to == rt_.rank()) return;  // a call to ourselves passes the handle itself
    rv.data = RRefForkData{s->owner, s->id, fork_ids.next(), rt_.rank(), s->type_name};
    caf::anon_send(context_, ForkRegistration{s, rv.data.fork_id, to});
  });
}

void RRefRuntime::convert_arguments(const CallRequest& req, std::vector<Value>& args) {
  const std::vector<ParamInfo>* params = nullptr;
  if (req.kind == CallKind::function) {
    if (auto* e = FunctionRegistry::instance().find(req.function)) params = &e->params;
  }
  if (!params) return;
  for (size_t i = 0; i < args.size() && i < params->size(); ++i) {
    if (!(*params)[i].is_rref || args[i].is_rref()) continue;
    // A T where the function takes RRef<T>: an RRef owned by the caller.
    auto type = (*params)[i].type;
    if (type.rfind("RRef<", 0) == 0) type = type.substr(5, type.size() - 6);
    auto holder = std::make_shared<Holder>();
    holder->set_value(std::move(args[i]));
    auto id = rref_ids.next();
    register_owner(id, holder);
    auto state = new_owner_state(id, holder, type);
    args[i] = Value(RRefValue{RRefForkData{rt_.rank(), id, ForkId{}, -1, type}, state});
  }
}

std::optional<std::string> RRefRuntime::foreign_rref(const std::vector<Value>& args) const {
  std::optional<std::string> why;
  for (auto a : args)  // a copy: for_each_rref visits mutable values
    a.for_each_rref([&](RRefValue& rv) {
      auto s = state_of(rv);
      if (!why && s && s->rt.lock().get() != &rt_)
        why = "RRef " + to_string(s->id) + " belongs to another worker of this process, not to " + rt_.name();
    });
  return why;
}

bool RRefRuntime::wants(const CallRequest& req) const {
  if (req.kind != CallKind::function || req.is_remote()) return true;
  for (const auto& a : req.args)
    if (a.contains_rref()) return true;
  return false;
}

void RRefRuntime::handle_request(CallRequest&& req, caf::strong_actor_ptr reply_to) {
  caf::anon_send(context_, IncomingCall{std::move(req), std::move(reply_to)});
}

void RRefRuntime::handle_control(RRefControl&& msg) { caf::anon_send(context_, std::move(msg)); }
void RRefRuntime::handle_ack(RRefControlAck&& ack) { caf::anon_send(context_, std::move(ack)); }
void RRefRuntime::on_peer_down(WorkerId rank) { caf::anon_send(context_, peer_down_atom::value, rank); }
void RRefRuntime::on_shutdown_begin() { caf::anon_send(context_, shutdown_atom::value); }

bool RRefRuntime::idle() const {
  return counters_->outbox == 0 && counters_->owners == 0 && counters_->pending_users == 0 &&
         counters_->pending_children == 0;
}

std::map<std::string, int64_t> RRefRuntime::debug_info() const {
  return {{"num_owner_rrefs", counters_->owners.load()},
          {"num_forks", counters_->forks.load()},
          {"num_pending_futures", counters_->pending_fetches.load()},
          {"num_pending_users", counters_->pending_users.load()},
          {"num_pending_children", counters_->pending_children.load()},
          {"num_user_rrefs", counters_->user_rrefs.load()},
          {"num_unacked_control_messages", counters_->outbox.load()}};
}

void RRefRuntime::adopt_then(Value v, Completion done) {
  caf::anon_send(context_, AdoptReply{std::move(v), std::move(done)});
}

RRefStatePtr RRefRuntime::new_user_state(RRefId id, WorkerId owner, ForkId fork, std::string type_name) {
  auto s = std::make_shared<RRefState>();
  s->id = id;
  s->owner = owner;
  s->owner_name = rt_.name_of(owner);
  s->type_name = std::move(type_name);
  s->fork = fork;
  s->rt = rt_.lifetime();
  counters_->user_rrefs.fetch_add(1);
  track(s);
  return s;
}

RRefStatePtr RRefRuntime::new_owner_state(RRefId id, std::shared_ptr<Holder> holder, std::string type_name) {
  auto s = std::make_shared<RRefState>();
  s->id = id;
  s->owner = rt_.rank();
  s->owner_name = rt_.name();
  s->type_name = std::move(type_name);
  s->holder = std::move(holder);
  s->confirmed = true;
  s->rt = rt_.lifetime();
  track(s);
  return s;
}

void RRefRuntime::register_owner(RRefId id, std::shared_ptr<Holder> holder) {
  caf::anon_send(context_, OwnerRegistration{id, std::move(holder)});
}

// -- inspection ---------------------------------------------------------------------------

void RRefRuntime::owner_added(RRefId id, std::shared_ptr<Holder> holder, std::shared_ptr<OwnerStats> stats) {
  std::lock_guard<std::mutex> lock(owners_mtx_);
  owners_[id] = OwnerEntry{std::move(holder), std::move(stats)};
}

void RRefRuntime::owner_removed(RRefId id) {
  std::lock_guard<std::mutex> lock(owners_mtx_);
  owners_.erase(id);
}

namespace {

int64_t ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t).count();
}

// "Tensor[float32 2x3]", a class name, a scalar's kind, "pending" or "error".
std::string describe_held(const Holder& h, int64_t& bytes) {
  bytes = 0;
  if (!h.is_set()) return "pending";
  if (h.error()) return "error";
  if (h.holds_object()) return h.cls() ? h.cls()->name : "object";
  const Value& v = h.value();
  if (v.is_tensor()) {
    const auto& t = v.to_tensor();
    bytes = int64_t(t.nbytes());
    std::string shape;
    for (auto d : t.sizes()) shape += (shape.empty() ? "" : "x") + std::to_string(d);
    return std::string("Tensor[") + c10::toString(t.scalar_type()) + " " + (shape.empty() ? "scalar" : shape) + "]";
  }
  if (v.is_list()) return "List[" + std::to_string(v.to_list().size()) + "]";
  return v.type_name();
}

}  // namespace

RRefInspection RRefRuntime::inspect() const {
  RRefInspection out;
  {
    std::lock_guard<std::mutex> lock(owners_mtx_);
    for (auto& [id, e] : owners_) {
      OwnedRRefInfo info;
      info.id = to_string(id);
      info.type = describe_held(*e.holder, info.bytes);
      info.forks = e.stats->forks.load();
      info.age_ms = ms_since(e.stats->created);
      out.owned.push_back(std::move(info));
    }
  }
  std::lock_guard<std::mutex> lock(live_mtx_);
  for (auto& w : live_) {
    auto s = w.lock();
    if (!s || s->is_owner() || s->confirmed.load()) continue;
    out.pending_users.push_back(PendingUserInfo{to_string(s->id), to_string(s->fork), s->owner_name, ms_since(s->created)});
  }
  return out;
}

void RRefRuntime::track(const RRefStatePtr& s) {
  std::lock_guard<std::mutex> lock(live_mtx_);
  if (live_.size() >= 1024 && live_.size() >= 2 * live_alive_hint_) {
    live_.erase(std::remove_if(live_.begin(), live_.end(), [](const auto& w) { return w.expired(); }), live_.end());
    live_alive_hint_ = live_.size();
  }
  live_.push_back(s);
}

std::vector<RRefStatePtr> RRefRuntime::take_live_states() {
  std::lock_guard<std::mutex> lock(live_mtx_);
  std::vector<RRefStatePtr> out;
  for (auto& w : live_)
    if (auto s = w.lock()) out.push_back(std::move(s));
  live_.clear();
  return out;
}

void RRefRuntime::state_dropped(RRefState& s) {
  if (!s.is_owner()) counters_->user_rrefs.fetch_sub(1);
  if (s.released.load() || !context_) return;
  caf::anon_send(context_, StateDropped{s.id, s.fork, s.owner, s.is_owner()});
}

RRefRuntime& rref_runtime(WorkerServices& rt) { return static_cast<RRefRuntime&>(*rt.rrefs()); }
RRefCounters& rref_counters(WorkerServices& rt) { return rref_runtime(rt).counters(); }
std::shared_ptr<RRefCounters> rref_counters_ptr(WorkerServices& rt) { return rref_runtime(rt).counters_ptr(); }

RRefState::~RRefState() {
  if (auto r = rt.lock())
    if (r->rrefs()) rref_runtime(*r).state_dropped(*this);
}

}  // namespace castor::detail
