// RRefRuntime: the rref/ layer's thread-safe entry points (see
// rref_runtime.hpp). Work that changes protocol state goes to the RRef
// context actor as a message; nothing here touches its tables.
#include "rref/rref_runtime.hpp"

#include <caf/send.hpp>

#include "actors/hooks/worker_services.hpp"
#include "rref/calls/on_arrival.hpp"

namespace castor::detail {

RRefRuntime::RRefRuntime(WorkerServices& rt)
    : rref_ids(rt.rank(), rt.options().incarnation), fork_ids(rt.rank(), rt.options().incarnation), rt_(rt), counters_(std::make_shared<RRefCounters>()),
      faults_(rt.options().faults), system_(&rt.system()) {
  context_ = spawn_rref_context(this);
}

RRefRuntime::~RRefRuntime() { stop(); }

void RRefRuntime::stop() {
  if (!context_) return;  // stopped already (the runtime's teardown, then our destructor)
  gate_.close();           // D8: from now on the context runs on CAF's threads
  caf::anon_send_exit(context_, caf::exit_reason::user_shutdown);
  gate_.close_and_wait(std::chrono::seconds(5));  // what castor's threads run now ends first
  gate_.seal_and_wait(std::chrono::seconds(1));   // and nothing reads context_ while it is reset
  context_ = nullptr;
}

void RRefRuntime::fork_for(Value& v, WorkerId to) {
  v.for_each_rref([&](RRefValue& rv) {
    auto s = state_of(rv);
    if (!s || to == rt_.rank()) return;  // a call to ourselves passes the handle itself
    auto [recipe, restarts] = s->restart_recipe();
    auto life = s->is_owner() ? rt_.options().incarnation : s->owner_incarnation.load();
    rv.data = RRefForkData{s->owner, s->id, fork_ids.next(), rt_.rank(), s->type_name, life, restarts, recipe};
    // D9: a reply's value is encoded under the teardown gate's lock. A
    // request's could run the context here, but measured slower: 9 of 9
    // alternating pairs of rpc_sync with an RRef argument took 1.00-1.45x
    // the posted time (median 1.16), the registration delaying the request.
    gate_.post(system_, context_, ForkRegistration{s, rv.data.fork_id, to});
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
  // Note [Values on arrival]: served here, on the thread that received it,
  // what needs no protocol state first.
  if (req.kind == CallKind::fetch) {
    if (auto holder = owner_index_.find(req.target)) {  // V3
      counters_->fetches_on_arrival.fetch_add(1, std::memory_order_relaxed);
      return answer_fetch(std::move(holder), req.target, rt_.name(), counters_, rt_.replier(reply_to, req));
    }
  } else if (starts_on_arrival(req)) {  // V2
    counters_->values_on_arrival.fetch_add(1, std::memory_order_relaxed);
    auto started = start_on_arrival(rt_, owner_index_, req, rt_.replier(reply_to, req));
    to_context(IncomingCall{std::move(req), std::move(reply_to), std::move(started)});
    return;
  }
  to_context(IncomingCall{std::move(req), std::move(reply_to), nullptr});
}

void RRefRuntime::handle_control(RRefControl&& msg) { to_context(std::move(msg)); }
void RRefRuntime::handle_ack(RRefControlAck&& ack) { to_context(std::move(ack)); }
void RRefRuntime::on_peer_down(WorkerId rank) { to_context(peer_down_atom::value, rank); }
void RRefRuntime::on_peer_rejoined(WorkerId rank, uint32_t incarnation) {
  to_context(rejoined_atom::value, rank, incarnation);
}
void RRefRuntime::on_shutdown_begin() { to_context(shutdown_atom::value); }

bool RRefRuntime::idle() const {
  return counters_->outbox.load() == 0 && counters_->owners.load() == 0 && counters_->pending_users.load() == 0 &&
         counters_->pending_children.load() == 0;
}

std::map<std::string, int64_t> RRefRuntime::debug_info() const {
  return {{"num_owner_rrefs", counters_->owners.load()},
          {"num_owner_actors", counters_->owner_actors.load()},
          {"num_forks", counters_->forks.load()},
          {"num_pending_futures", counters_->pending_fetches.load()},
          {"num_pending_users", counters_->pending_users.load()},
          {"num_pending_children", counters_->pending_children.load()},
          {"num_user_rrefs", counters_->user_rrefs.load()},
          {"num_unacked_control_messages", counters_->outbox.load()},
          {"values_started_on_arrival_total", counters_->values_on_arrival.load()},
          {"fetches_answered_on_arrival_total", counters_->fetches_on_arrival.load()},
          {"forks_borrowed_total", counters_->forks_borrowed.load()}};  // G3 of Note [RRef protocol]
}

void RRefRuntime::after(std::chrono::milliseconds delay, std::function<void()> f) {
  gate_.guarded([&] { caf::delayed_anon_send(context_, delay, Deadline{std::move(f)}); });
}

void RRefRuntime::adopt_then(Value v, Completion done) {
  to_context(AdoptReply{std::move(v), std::move(done)});
}

RRefStatePtr RRefRuntime::new_user_state(RRefId id, WorkerId owner, ForkId fork, std::string type_name,
                                         const RRefForkData* arrived) {
  auto s = std::make_shared<RRefState>();
  s->id = id;
  s->owner = owner;
  s->owner_name = rt_.name_of(owner);
  if (arrived && arrived->owner_incarnation > 0)
    s->owner_incarnation = arrived->owner_incarnation;  // RS4: maybe a life that died since
  else if (rt_.world().has(owner))
    s->owner_incarnation = rt_.world().member(owner).incarnation;
  if (arrived && arrived->recipe)
    s->restart = std::make_shared<RestartPolicy>(arrived->recipe, arrived->restarts, s->owner_incarnation.load());
  s->type_name = std::move(type_name);
  s->fork = fork;
  s->rt = rt_.lifetime();
  counters_->user_rrefs.fetch_add(1);
  live_.track(s);
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
  live_.track(s);
  return s;
}

void RRefRuntime::register_owner(RRefId id, std::shared_ptr<Holder> holder) {
  owner_index_.holder_for(id, holder);  // V1 of Note [Values on arrival]: before a request of ours can arrive
  to_context(OwnerRegistration{id, std::move(holder)});
}

RRefInspection RRefRuntime::inspect() const {
  RRefInspection out;
  out.owned = owner_index_.owned();
  out.pending_users = live_.unconfirmed();
  return out;
}

void RRefRuntime::state_dropped(RRefState& s) {
  if (!s.is_owner()) counters_->user_rrefs.fetch_sub(1);
  if (s.released.load()) return;
  // D9: a handle ends wherever its last copy dies, perhaps under a lock.
  gate_.post(system_, context_, StateDropped{s.id, s.fork, s.owner, s.is_owner(), s.owner_incarnation});
}

RRefRuntime& rref_runtime(WorkerServices& rt) { return static_cast<RRefRuntime&>(*rt.rrefs()); }

RRefRuntime* live_rref_runtime(const std::weak_ptr<WorkerServices>& life, std::shared_ptr<WorkerServices>& keep) {
  keep = life.lock();
  return keep && keep->rrefs() ? &rref_runtime(*keep) : nullptr;
}
RRefCounters& rref_counters(WorkerServices& rt) { return rref_runtime(rt).counters(); }
std::shared_ptr<RRefCounters> rref_counters_ptr(WorkerServices& rt) { return rref_runtime(rt).counters_ptr(); }

RRefState::~RRefState() {
  if (auto r = rt.lock())
    if (r->rrefs()) rref_runtime(*r).state_dropped(*this);
}

}  // namespace castor::detail
