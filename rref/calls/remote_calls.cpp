// Remote calls: the dispatch of a prepared call on its CallKind (see
// remote_calls.hpp).
#include "rref/calls/remote_calls.hpp"

#include "actors/hooks/worker_services.hpp"
#include "rref/calls/on_arrival.hpp"
#include "rref/class_registry.hpp"
#include "rref/rref_runtime.hpp"

namespace castor::detail {
namespace {

// remote(): the new value's slot, made if a call on it came first. Its
// owner counts the caller's fork with the creation (Note [RRef protocol]).
std::shared_ptr<Holder> create_result_slot(context_pointer self, const CallRequest& req) {
  return to_owner(self, OwnerEvent::created(req.result_to.rref_id, req.result_to.fork_id, req.caller));
}

// remote()'s timeout bounds the value's creation (see on_creation_due).
void bound_creation(context_pointer self, const CallRequest& req, const Holder& result) {
  if (req.create_within_ms > 0 && !result.is_set())
    self->delayed_send(self, std::chrono::milliseconds(req.create_within_ms), create_by_atom::value,
                       req.result_to.rref_id, req.create_within_ms);
}

void run_constructor(WorkerServices* rt, const ClassEntry* cls, std::vector<Value>&& args, std::shared_ptr<Holder> holder,
                     Completion ack) {
  bool accepted = rt->post([rt, cls, args = std::move(args), holder, ack]() mutable {
    try {
      holder->set_object(cls->construct(std::move(args)), cls);
    } catch (...) {
      holder->set_error(error_from_exception(std::current_exception(), rt->name(), "constructor of '" + cls->name + "'"));
    }
    ack(Outcome::success(Value()));
  });
  if (!accepted) {
    holder->set_error(make_error(ErrorKind::Remote, rt->name(), "worker " + rt->name() + ": executor saturated"));
    ack(Outcome::success(Value()));
  }
}

}  // namespace

void make_value(WorkerServices* rt, CallRequest&& req, std::shared_ptr<Holder> holder, Completion ack) {
  if (auto* cls = ClassRegistry::instance().find(req.function))
    return run_constructor(rt, cls, std::move(req.args), std::move(holder), std::move(ack));
  req.result_to = RRefForkData{};
  rt->execute(std::move(req), [holder, ack](Outcome o) {
    if (o.ok)
      holder->set_value(std::move(o.value));
    else
      holder->set_error(std::move(o.error));
    ack(Outcome::success(Value()));
  });
}

void count_started(context_pointer self, IncomingCall&& ic) {
  const auto& req = ic.request;
  auto result = create_result_slot(self, req);
  if (!result) {
    self->state.rr->owner_index().removed(req.result_to.rref_id);  // V4
    return ic.started->counted(gone_error(self, req.result_to.rref_id));
  }
  bound_creation(self, req, *result);
  ic.started->counted(std::nullopt);
}

void dispatch(context_pointer self, IncomingCall&& ic) {
  auto& st = self->state;
  auto* rt = st.rt;
  auto& req = ic.request;
  auto reply = rt->replier(ic.reply_to, req);
  if (req.is_remote() && req.result_to.restarts > 0) return remake(self, std::move(req), std::move(reply));  // RS2
  std::shared_ptr<Holder> result;
  if (req.is_remote()) {
    result = create_result_slot(self, req);
    if (!result) return reply(Outcome::failure(gone_error(self, req.result_to.rref_id)));
    if (req.result_to.recipe) result->set_recipe(req.result_to.recipe, 0);  // Note [Restartable values]
    bound_creation(self, req, *result);
  }
  switch (req.kind) {
    case CallKind::function: {
      if (!result) return rt->execute(std::move(req), std::move(reply));
      return make_value(rt, std::move(req), result, std::move(reply));
    }
    case CallKind::method:
    case CallKind::fetch: {
      // A call may overtake the remote() that creates its target: the slot
      // is made now and the call waits for the value (a fetch on the
      // holder, a method call in the owner actor's mailbox).
      auto* slot = owner_slot(self, req.target, true);
      if (!slot) return reply(Outcome::failure(gone_error(self, req.target)));
      auto holder = slot->holder;
      if (req.kind == CallKind::fetch) {  // L3 of Note [Light owners]
        end_if_done(self, req.target, *slot);  // L2: made for a dead creator, the holder has its error
        return answer_fetch(std::move(holder), req.target, rt->name(), st.counters, std::move(reply));
      }
      if (end_if_done(self, req.target, *slot)) {
        auto err = holder->error();  // set by the creator's death (apply_owner_event)
        return reply(Outcome::failure(err ? no_value_error(req.target, rt->name(), *err)
                                          : gone_error(self, req.target)));
      }
      // A value (not an object) has no methods: no actor is spawned to say so.
      if (!slot->actor && holder->is_set() && !holder->error() && !holder->holds_object())
        return reply(Outcome::failure(not_an_object_error(req.target, rt->name(), req.function)));
      self->send(owner_actor(self, req.target, *slot), OwnerCall{std::move(req), std::move(reply), result});
      return;
    }
  }
}

}  // namespace castor::detail
