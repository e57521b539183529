// Re-registration of restartable RRefs with their owner's next life (Note
// [Restartable values] in restart.hpp): the holder's side (RS1, RS4) and the
// new life's (RS2, RS6), both run by the RRef context actor.
#include <caf/send.hpp>

#include "actors/api/worker_access.hpp"
#include "actors/hooks/worker_services.hpp"
#include "rref/calls/remote_calls.hpp"
#include "rref/context_state.hpp"
#include "rref/rref_runtime.hpp"

namespace castor::detail {
namespace {

ErrorInfo spent_error(const RRefState& s, uint32_t incarnation) {
  auto max = s.restart->max_restarts();
  return ErrorInfo{ErrorKind::OwnerDied, s.owner_name,
                   "RRef " + to_string(s.id) + ": its owner, worker " + s.owner_name + ", rejoined as incarnation " +
                       std::to_string(incarnation) + ", but the value's " + std::to_string(max) +
                       " restart(s) are spent (castor::Restart{" + std::to_string(max) + "})"};
}

ErrorInfo remake_failed(const RRefState& s, uint32_t incarnation, const ErrorInfo& cause) {
  return ErrorInfo{ErrorKind::OwnerDied, s.owner_name,
                   "RRef " + to_string(s.id) + ": its owner, worker " + s.owner_name +
                       ", died, and re-registering with its incarnation " + std::to_string(incarnation) +
                       " failed: " + cause.message};
}

}  // namespace

void re_register_all(context_pointer self, WorkerId rank, uint32_t incarnation) {
  for (auto& s : self->state.rr->live_states().alive())
    if (s->restart && !s->is_owner() && s->owner == rank && s->owner_incarnation.load() < incarnation)
      re_register(self, s, incarnation, -1);
}

void re_register(context_pointer self, const RRefStatePtr& s, uint32_t incarnation, WorkerId parent) {
  auto* rt = self->state.rt;
  auto policy = s->restart;
  if (!policy->begin(incarnation, spent_error(*s, incarnation))) return;  // RS3, or settled already
  const auto& recipe = policy->recipe();
  CallRequest req;
  req.function = recipe->function;
  req.args = recipe->args;
  req.result_to = RRefForkData{s->owner,      s->id, s->fork, rt->rank(), s->type_name, incarnation,
                               policy->restarts() + 1, recipe};
  auto me = caf::actor_cast<rref_context_actor>(self);
  ReRegistered answer{s, policy, s->id, s->fork, s->owner, parent, incarnation, Outcome::success(Value())};
  // RS1's bound: the new life answers once the fork is counted, before the
  // recipe has run, so rpc_timeout is ample.
  call_request(rt->worker(), s->owner, std::move(req), rt->options().rpc_timeout,
               [me, answer = std::move(answer)](Outcome o) mutable {
                 answer.outcome = std::move(o);
                 caf::anon_send(me, std::move(answer));
               });
}

void on_re_registered(context_pointer self, ReRegistered&& r) {
  if (!r.outcome.ok) {
    auto s = r.state.lock();
    if (r.outcome.error.kind == ErrorKind::Unreachable) {
      // The new life died too: its uses fail as the owner's death says,
      // and the next life may try again (a restart was spent on this one).
      r.policy->finish(r.incarnation, std::nullopt);
      return;
    }
    ErrorInfo why = r.outcome.error;
    if (s) why = remake_failed(*s, r.incarnation, r.outcome.error);
    r.policy->finish(r.incarnation, std::move(why));
    return;
  }
  if (auto s = r.state.lock()) {
    s->owner_incarnation = r.incarnation;
    s->confirmed = true;
  } else {
    // Every handle went while the request was out: the new life counts a
    // fork nobody holds, and no drop will tell it (the handle's drop named
    // the old life). G1 again:
    send_control(self, ControlToSend{r.owner, RRefOp::user_delete, r.rref, r.fork});
  }
  // RS4: the parent may let go of its pending child (a repeat finds nothing).
  if (r.parent >= 0 && r.parent != r.owner)
    send_control(self, ControlToSend{r.parent, RRefOp::child_accept, r.rref, r.fork});
  r.policy->finish(r.incarnation, std::nullopt);
}

void remake(context_pointer self, CallRequest&& req, Completion reply) {
  auto& st = self->state;
  auto* rt = st.rt;
  auto fork = req.result_to;
  if (st.owners.has_ended(fork.rref_id))  // RS6
    return reply(Outcome::failure(make_error(
        ErrorKind::Lookup, rt->name(),
        "worker " + rt->name() + ": RRef " + to_string(fork.rref_id) +
            " was made again here after a restart and has ended since: every other holder let go of it before "
            "worker " + rt->name_of(req.caller) + " re-registered")));
  auto* slot = owner_slot(self, fork.rref_id, true, nullptr, /*remade=*/true);
  if (!slot) return reply(Outcome::failure(gone_error(self, fork.rref_id)));
  auto holder = slot->holder;  // the slot may end with the event below (L2 of Note [Light owners])
  if (holder->recipe().first) {
    // RS2: made already, by another holder's request: count this fork.
    to_owner(self, OwnerEvent::add_fork(fork.rref_id, fork.fork_id, req.caller, /*from_peer=*/true));
    return reply(Outcome::success(Value()));
  }
  holder->set_recipe(fork.recipe, fork.restarts);
  to_owner(self, OwnerEvent::created(fork.rref_id, fork.fork_id, req.caller));
  reply(Outcome::success(Value()));
  make_value(rt, std::move(req), holder, [](Outcome) {});
}

}  // namespace castor::detail
