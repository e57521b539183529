// Call preparation (see call_preparation.hpp).
#include "rref/calls/call_preparation.hpp"

#include <caf/send.hpp>

#include "actors/hooks/worker_services.hpp"
#include "rref/calls/remote_calls.hpp"
#include "rref/class_registry.hpp"

namespace castor::detail {
namespace {

// Which parameters take an RRef, for the function or method `req` names.
std::vector<bool> rref_params(context_pointer self, const CallRequest& req, const std::vector<Value>& args) {
  std::vector<bool> out(args.size(), false);
  const std::vector<ParamInfo>* params = nullptr;
  if (req.kind == CallKind::function) {
    if (auto* e = FunctionRegistry::instance().find(req.function)) params = &e->params;
  } else if (req.kind == CallKind::method) {
    auto* slot = self->state.owners.find(req.target);
    if (slot && slot->holder->is_set() && slot->holder->cls())
      if (auto* m = slot->holder->cls()->method(req.function)) params = &m->params;
  }
  // Unknown targets (a builtin, a method whose object is not there yet): a
  // by-value parameter is the safe reading, resolved like the RFC says.
  if (params)
    for (size_t i = 0; i < out.size() && i < params->size(); ++i) out[i] = (*params)[i].is_rref;
  return out;
}

// Runs (or fails) a call that waits for nothing more.
void run_ready(context_pointer self, std::optional<ReadyCall> ready) {
  if (!ready) return;
  if (ready->failure) {
    self->state.rt->replier(ready->call.reply_to, ready->call.request)(Outcome::failure(std::move(*ready->failure)));
    return;
  }
  dispatch(self, std::move(ready->call));
}

// Fetches RRef `rref` from its owner for argument `index` of prepared call
// `id`, inside the call's autograd context (the value joins its graph); the
// outcome comes back as ArgumentReady, with `release` if the fork was borrowed.
void fetch_argument(context_pointer self, PreparedCallId id, size_t index, WorkerId owner, RRefId rref,
                    std::optional<ControlToSend> release) {
  auto& st = self->state;
  CallRequest fetch;
  fetch.id = st.rt->next_call_id();
  fetch.caller = st.rt->rank();
  fetch.function = "to_here";
  fetch.kind = CallKind::fetch;
  fetch.target = rref;
  fetch.autograd.context = st.prepared.find(id)->request.autograd.context;
  auto me = caf::actor_cast<rref_context_actor>(self);
  st.rt->start_call(owner, std::move(fetch), st.rt->options().rpc_timeout,
                    [me, id, index, release = std::move(release)](Outcome o) {
                      caf::anon_send(me, ArgumentReady{id, index, std::move(o), release});
                    });
}

// G3 of Note [RRef protocol]: a fork from another user, passed where the
// function takes the value, is fetched with no fork of ours; its parent is
// released when the fetch is answered. False if it must be adopted instead.
bool borrow_argument(context_pointer self, PreparedCallId id, size_t index) {
  auto& st = self->state;
  const auto& rv = st.prepared.find(id)->request.args[index].to_rref_value();
  if (rv.handle) return false;  // a call to ourselves passed the handle itself
  auto release = st.forks->borrowed(rv.data);
  if (!release) return false;
  st.counters->forks_borrowed.fetch_add(1, std::memory_order_relaxed);
  st.prepared.wait(id);
  fetch_argument(self, id, index, rv.data.owner, rv.data.rref_id, std::move(release));
  return true;
}

// An RRef passed where the callee takes the value: fetch it (from ourselves
// when we own it; otherwise the owner sends it straight here) before running.
void resolve_argument(context_pointer self, PreparedCallId id, size_t index) {
  auto& st = self->state;
  auto* call = st.prepared.find(id);
  auto state = state_of(call->request.args[index].to_rref_value());
  st.prepared.wait(id);
  if (state->is_owner()) {
    // On the owner the function gets the stored value itself, as local_value()
    // would: a parameter passed this way stays the leaf its gradients reach.
    auto me = caf::actor_cast<rref_context_actor>(self);
    auto holder = state->holder;
    holder->on_set([me, id, index, holder] {
      if (auto err = holder->error())
        caf::anon_send(me, ArgumentReady{id, index, Outcome::failure(*err), std::nullopt});
      else
        caf::anon_send(me, ArgumentReady{id, index, Outcome::success(holder->value()), std::nullopt});
    });
    return;
  }
  fetch_argument(self, id, index, state->owner, state->id, std::nullopt);
}

}  // namespace

void prepare_call(context_pointer self, IncomingCall&& ic) {
  auto& st = self->state;
  auto id = st.prepared.add(std::move(ic));
  // Held while its arguments are adopted: a wait settled meanwhile (a fork
  // whose owner is known dead fails at once) must not take the call from
  // under `request`.
  st.prepared.wait(id);
  auto& request = st.prepared.find(id)->request;  // stays put while the call is held
  auto takes_rref = rref_params(self, request, request.args);
  for (size_t i = 0; i < request.args.size(); ++i) {
    bool by_value = request.args[i].is_rref() && !takes_rref[i];
    if (by_value && borrow_argument(self, id, i)) continue;
    adopt_value(self, request.args[i], id);
    if (by_value) resolve_argument(self, id, i);
  }
  run_ready(self, st.prepared.done(id));
}

void on_argument_ready(context_pointer self, ArgumentReady&& r) {
  auto& st = self->state;
  if (r.release_parent) send_control(self, *r.release_parent);  // G3: the borrow is over
  auto* call = st.prepared.find(r.call);
  if (!call) return;
  std::optional<ErrorInfo> failure;
  if (r.outcome.ok) {
    auto& arg = call->request.args[r.index];
    arg = std::move(r.outcome.value);
    adopt_value(self, arg, r.call);  // the fetched value may hold RRefs too
  } else {
    // The error keeps the fetch's kind and the worker that kind is about
    // (the argument's owner that died, the worker that raised): a caller
    // that reads an Unreachable error of this worker as its own death (an
    // RRef method's OwnerDied) would blame the wrong worker.
    const auto& cause = r.outcome.error;
    failure = make_error(cause.kind, cause.worker.empty() ? st.rt->name() : cause.worker,
                         "worker " + st.rt->name() + ": argument " + std::to_string(r.index + 1) + " of '" +
                             call->request.function + "' (an RRef) could not be fetched: " + cause.message);
  }
  run_ready(self, st.prepared.done(r.call, std::move(failure)));
}

void fork_confirmed_for(context_pointer self, const std::vector<PreparedCallId>& calls) {
  for (auto id : calls) run_ready(self, self->state.prepared.done(id));
}

void fork_lost_for(context_pointer self, const std::vector<PreparedCallId>& calls, WorkerId owner, RRefId rref) {
  auto who = self->state.rt->name_of(owner);
  auto what = rref.valid() ? "RRef " + to_string(rref) : std::string("an RRef argument");
  for (auto id : calls)
    run_ready(self, self->state.prepared.done(id, make_error(ErrorKind::OwnerDied, who,
                                                             "worker " + self->state.rt->name() + ": " + what +
                                                                 " cannot be used: its owner, worker " + who + ", died")));
}

}  // namespace castor::detail
