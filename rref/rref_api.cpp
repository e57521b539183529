// remote(), make_rref(), to_here(), method calls: requests built for the
// worker runtime, and the owner-side shortcuts.
#include "rref/rref_api.hpp"

#include <cxxabi.h>

#include <future>
#include <stdexcept>

#include "actors/hooks/autograd_hooks.hpp"
#include "actors/hooks/worker_services.hpp"
#include "actors/api/worker.hpp"
#include "actors/api/worker_access.hpp"
#include "actors/cluster/world.hpp"
#include "rref/rref_runtime.hpp"

namespace castor::detail {
namespace {

std::shared_ptr<WorkerServices> runtime_of(const RRefStatePtr& s) {
  auto rt = s->rt.lock();
  if (!rt || !rt->running())
    throw ShutdownError(ErrorInfo{ErrorKind::Shutdown, "",
                                  "RRef " + to_string(s->id) + ": its worker is shut down"});
  return rt;
}

// The error of a use of `s` whose owner died, naming the owner and the
// RRef: OwnerDied when `e` says the owner is unreachable, else `e` itself.
ErrorInfo owner_failure(const RRefState& s, ErrorInfo e) {
  if (e.kind != ErrorKind::Unreachable || e.worker != s.owner_name) return e;
  return ErrorInfo{ErrorKind::OwnerDied, s.owner_name,
                   "RRef " + to_string(s.id) + ": its owner, worker " + s.owner_name + ", died (" + e.message + ")"};
}

// The error of a use of `s` whose creating call failed: names the RRef and
// its owner (a timed-out remote() says so, like PyTorch's next use does).
ErrorInfo creation_failure(const RRefState& s, ErrorInfo e) {
  if (e.kind != ErrorKind::Timeout) return owner_failure(s, std::move(e));
  if (e.message.rfind("RRef ", 0) == 0) return e;  // the owner's own words already name it
  e.message = "RRef " + to_string(s.id) + ": creating its value on worker " + s.owner_name + " failed: " + e.message;
  return e;
}

// The error of a use of restartable `s` while its owner is dead (RS3).
ErrorInfo restart_pending(const RRefState& s) {
  auto next = s.restart->restarts() + 1;
  auto max = s.restart->max_restarts();
  auto what = next <= max ? "; the value will be made again when it rejoins (restart " + std::to_string(next) + " of " +
                                std::to_string(max) + ")"
                          : "; its " + std::to_string(max) + " restart(s) are spent";
  return owner_failure(s, ErrorInfo{ErrorKind::Unreachable, s.owner_name,
                                    "worker " + s.owner_name + " is unreachable" + what});
}

// Throws if `s` cannot be used. Returns the owner's life that the use must
// wait for this worker to re-register with (RS1 of Note [Restartable
// values]), or 0 to go on now.
uint32_t check_usable(const RRefStatePtr& s) {
  if (s->released.load())
    throw ShutdownError(ErrorInfo{ErrorKind::Shutdown, s->owner_name,
                                  "RRef " + to_string(s->id) + " was released by this worker's shutdown"});
  if (auto failed = s->creation_error()) throw_rpc_error(creation_failure(*s, std::move(*failed)));
  auto rt = s->rt.lock();
  if (!rt || s->is_owner()) return 0;
  const auto& world = rt->world();
  if (!world.has(s->owner)) return 0;
  if (s->restart)
    if (auto failed = s->restart->failure()) throw_rpc_error(*failed);  // RS3
  // An owner already dead in this worker's world fails the use at once.
  if (!world.alive(s->owner)) {
    if (s->restart) throw_rpc_error(restart_pending(*s));
    throw_rpc_error(owner_failure(*s, ErrorInfo{ErrorKind::Unreachable, s->owner_name,
                                                "worker " + s->owner_name + " is unreachable"}));
  }
  auto life = world.member(s->owner).incarnation;
  if (life == s->owner_incarnation.load()) return 0;
  if (s->restart) return life;  // RS1
  // RJ5 of Note [Rejoin]: the owner came back, but its value died with the
  // life that held it.
  throw_rpc_error(owner_failure(
      *s, ErrorInfo{ErrorKind::Unreachable, s->owner_name,
                    "worker " + s->owner_name + " is unreachable: incarnation " +
                        std::to_string(s->owner_incarnation.load()) + " died, incarnation " + std::to_string(life) +
                        " rejoined without its values"}));
}

// RS1: blocks until this worker re-registered `s` with the owner's life
// `life` (bounded by `limit`); throws what the re-registration failed with.
void wait_until_settled(const RRefStatePtr& s, uint32_t life, std::chrono::milliseconds limit) {
  auto settled = std::make_shared<std::promise<std::optional<ErrorInfo>>>();
  auto outcome = settled->get_future();
  s->restart->when_settled(life, [settled](std::optional<ErrorInfo> e) { settled->set_value(std::move(e)); });
  if (outcome.wait_for(limit) != std::future_status::ready)
    throw TimeoutError(ErrorInfo{ErrorKind::Timeout, s->owner_name,
                                 "RRef " + to_string(s->id) + ": not re-registered with worker " + s->owner_name +
                                     "'s incarnation " + std::to_string(life) + " within " +
                                     std::to_string(limit.count()) + " ms"});
  if (auto failed = outcome.get()) throw_rpc_error(*failed);
}

// RS1's request ended, but not with this worker's fork counted by life
// `life`: that life died meanwhile.
ErrorInfo not_re_registered(const RRefState& s, uint32_t life) {
  return owner_failure(s, ErrorInfo{ErrorKind::Unreachable, s.owner_name,
                                    "worker " + s.owner_name + " is unreachable: its incarnation " +
                                        std::to_string(life) + " died before this worker re-registered with it"});
}

// The wait of RS1, when check_usable asked for one (`life` > 0).
void settle(const RRefStatePtr& s, uint32_t life, std::chrono::milliseconds limit) {
  if (life == 0) return;
  wait_until_settled(s, life, limit);
  if (s->owner_incarnation.load() < life) throw_rpc_error(not_re_registered(*s, life));
  check_usable(s);  // the owner may have died again meanwhile (throws then)
}

}  // namespace

std::string class_name_of(const std::type_info& type) {
  auto name = ClassRegistry::instance().name_of(type);
  if (!name.empty()) return name;
  int status = 0;
  char* d = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : type.name();
  std::free(d);
  return out;
}

RRefStatePtr start_remote(const Worker& w, const std::string& to, const std::string& fn, std::vector<Value> args,
                          std::optional<std::chrono::milliseconds> timeout, std::string type_name,
                          std::optional<Restart> restart) {
  auto& rt = detail::services(w);
  auto& rr = rref_runtime(rt);
  auto owner = rank_of(w, to);
  CallRequest req;
  req.function = fn;
  rr.convert_arguments(req, args);
  std::shared_ptr<RestartRecipe> recipe;
  if (restart) {
    // Note [Restartable values]: what the owner's next life will run again.
    if (auto why = unusable_recipe_args(args))
      throw std::invalid_argument("remote('" + fn + "') on worker " + to + " with castor::Restart: " + *why +
                                  " (RS5 of Note [Restartable values])");
    recipe = std::make_shared<RestartRecipe>(RestartRecipe{fn, args, restart->max_restarts});
  }
  req.args = std::move(args);
  auto id = rr.rref_ids.next();
  if (timeout) req.create_within_ms = timeout->count();
  RRefStatePtr state;
  if (owner == rt.rank()) {
    // remote() to ourselves: we own the result; the handle is an owner's.
    auto holder = std::make_shared<Holder>();
    if (recipe) holder->set_recipe(recipe, 0);
    rr.register_owner(id, holder);
    state = rr.new_owner_state(id, holder, type_name);
    req.result_to = RRefForkData{owner, id, ForkId{}, rt.rank(), type_name};
  } else {
    auto fork = rr.fork_ids.next();
    state = rr.new_user_state(id, owner, fork, type_name);
    if (recipe) state->restart = std::make_shared<RestartPolicy>(recipe, 0, state->owner_incarnation.load());
    req.result_to = RRefForkData{owner, id, fork, rt.rank(), type_name, state->owner_incarnation.load(), 0, recipe};
  }
  std::weak_ptr<RRefState> weak = state;
  call_request(w, owner, std::move(req), timeout, [weak](Outcome o) {
    auto s = weak.lock();
    if (!s) return;
    if (o.ok)
      s->confirmed = true;  // the owner counted our fork with the creating call
    else
      s->set_creation_error(o.error);
  });
  return state;
}

RRefStatePtr start_remote_method(const RRefStatePtr& target, const std::string& method, std::vector<Value> args,
                                 std::optional<std::chrono::milliseconds> timeout, std::string type_name) {
  auto life = check_usable(target);
  auto rt = runtime_of(target);
  settle(target, life, rt->options().rpc_timeout);
  auto& rr = rref_runtime(*rt);
  CallRequest req;
  req.function = method;
  req.kind = CallKind::method;
  req.target = target->id;
  req.args = std::move(args);
  auto id = rr.rref_ids.next();
  if (timeout) req.create_within_ms = timeout->count();
  auto owner = target->owner;
  RRefStatePtr state;
  if (owner == rt->rank()) {
    auto holder = std::make_shared<Holder>();
    rr.register_owner(id, holder);
    state = rr.new_owner_state(id, holder, type_name);
    req.result_to = RRefForkData{owner, id, ForkId{}, rt->rank(), type_name};
  } else {
    auto fork = rr.fork_ids.next();
    state = rr.new_user_state(id, owner, fork, type_name);
    req.result_to = RRefForkData{owner, id, fork, rt->rank(), type_name};
  }
  std::weak_ptr<RRefState> weak = state;
  call_request(rt->worker(), owner, std::move(req), timeout, [weak](Outcome o) {
    if (auto s = weak.lock()) {
      if (o.ok)
        s->confirmed = true;
      else
        s->set_creation_error(o.error);
    }
  });
  return state;
}

RRefStatePtr make_owned_value(const Worker& w, Value v, std::string type_name) {
  auto& rr = rref_runtime(detail::services(w));
  auto holder = std::make_shared<Holder>();
  holder->set_value(std::move(v));
  auto id = rr.rref_ids.next();
  rr.register_owner(id, holder);
  return rr.new_owner_state(id, holder, std::move(type_name));
}

Value fetch_value(const RRefStatePtr& s, std::optional<std::chrono::milliseconds> timeout) {
  auto life = check_usable(s);
  auto rt = runtime_of(s);
  auto limit = timeout.value_or(rt->options().rpc_timeout);
  settle(s, life, limit);
  if (s->is_owner()) {
    if (!s->holder->wait(limit))
      throw TimeoutError(ErrorInfo{ErrorKind::Timeout, rt->name(),
                                   "to_here on RRef " + to_string(s->id) + " timed out after " +
                                       std::to_string(limit.count()) + " ms waiting for its value"});
    if (auto err = s->holder->error()) throw_rpc_error(*err);
    if (s->holder->holds_object())
      throw TypeError(ErrorInfo{ErrorKind::Type, rt->name(), "to_here on an RRef to an object: call its methods"});
    // Inside an autograd context the copy stays in the graph (a local path).
    bool in_context = rt->autograd() && rt->autograd()->current_context().valid();
    return in_context ? s->holder->value().clone_with_graph() : s->holder->value().deep_copy();
  }
  CallRequest req;
  req.function = "to_here";
  req.kind = CallKind::fetch;
  req.target = s->id;
  Promise<Value> p;
  call_request(rt->worker(), s->owner, std::move(req), limit, [p, s](Outcome o) {
    if (o.ok)
      p.try_set_value(std::move(o.value));
    else
      p.try_set_error(owner_failure(*s, std::move(o.error)));
  });
  return p.future().wait();
}

namespace {

// RS7: a restart is still to come for this holder.
bool restart_left(const RestartPolicy& p) { return p.restarts() < p.max_restarts() && !p.failure(); }

// RS7: whether a call of `method` on `s` that the owner's death cuts off
// waits for the value to come back and runs there.
bool reruns_after_restart(const RRefState& s, const std::string& method) {
  if (!s.restart || s.is_owner()) return false;
  const auto* cls = ClassRegistry::instance().find(s.type_name);
  const auto* m = cls ? cls->method(method) : nullptr;
  return m && m->idempotent && restart_left(*s.restart);
}

// RS7: `cause` (the owner's death) cut off a call of idempotent `method`:
// it runs again once this worker re-registered with the owner's next life,
// or fails with `cause` if that does not happen within the call's bound.
void rerun_after_restart(const RRefStatePtr& s, const std::string& method, std::vector<Value> args,
                         std::optional<std::chrono::milliseconds> timeout, Completion done, ErrorInfo cause) {
  auto rt = s->rt.lock();
  if (!rt || !rt->running()) return done(Outcome::failure(std::move(cause)));
  auto limit = timeout.value_or(rt->options().rpc_timeout);
  auto once = std::make_shared<std::atomic<bool>>(false);
  rref_runtime(*rt).after(limit, [once, done, cause, method, limit, owner = s->owner_name] {
    if (once->exchange(true)) return;
    auto late = cause;
    late.message += "; method '" + method + "' is idempotent, but worker " + owner + " did not come back within " +
                    std::to_string(limit.count()) + " ms to run it again";
    done(Outcome::failure(std::move(late)));
  });
  // Weak: a waiter the owner never settles must not keep the RRef alive (the bound answers the call).
  std::weak_ptr<RRefState> weak = s;
  s->restart->when_settled(s->owner_incarnation.load() + 1, [once, weak, method, args = std::move(args), timeout,
                                                              done](std::optional<ErrorInfo> e) mutable {
    if (once->exchange(true)) return;
    auto again = weak.lock();
    if (!again)
      return done(Outcome::failure(ErrorInfo{ErrorKind::Shutdown, "", "the RRef was released before its owner came back"}));
    if (e) return done(Outcome::failure(std::move(*e)));
    call_method(again, method, std::move(args), timeout, std::move(done));
  });
}

}  // namespace

void call_method(const RRefStatePtr& s, const std::string& method, std::vector<Value> args,
                 std::optional<std::chrono::milliseconds> timeout, Completion done) {
  bool rerun = reruns_after_restart(*s, method);
  try {
    if (auto life = check_usable(s)) {
      // RS1: the call goes once this worker re-registered with that life.
      s->restart->when_settled(life, [s, life, method, args = std::move(args), timeout,
                                      done](std::optional<ErrorInfo> e) mutable {
        if (!e && s->owner_incarnation.load() < life) e = not_re_registered(*s, life);
        if (e) return done(Outcome::failure(std::move(*e)));
        call_method(s, method, std::move(args), timeout, done);
      });
      return;
    }
    auto rt = runtime_of(s);
    CallRequest req;
    req.function = method;
    req.kind = CallKind::method;
    req.target = s->id;
    std::vector<Value> kept;
    if (rerun) kept = args;  // RS7: for a run on the next life
    req.args = std::move(args);
    call_request(rt->worker(), s->owner, std::move(req), timeout,
                 [s, done, rerun, method, kept = std::move(kept), timeout](Outcome o) mutable {
                   if (!o.ok) o = Outcome::failure(owner_failure(*s, std::move(o.error)));
                   if (!o.ok && rerun && o.error.kind == ErrorKind::OwnerDied)
                     return rerun_after_restart(s, method, std::move(kept), timeout, std::move(done),
                                                std::move(o.error));
                   done(std::move(o));
                 });
  } catch (const RpcError& e) {
    // RS7: the owner is dead, a restart is to come (args were not moved: check_usable threw first).
    if (rerun && e.info().kind == ErrorKind::OwnerDied && restart_left(*s->restart))
      return rerun_after_restart(s, method, std::move(args), timeout, std::move(done), e.info());
    done(Outcome::failure(e.info()));
  }
}

const Holder& owned_holder(const RRefStatePtr& s) {
  if (!s->is_owner())
    throw LookupError(ErrorInfo{ErrorKind::Lookup, s->owner_name,
                                "local_value(): RRef " + to_string(s->id) + " is owned by worker " + s->owner_name +
                                    ", not by this worker; use to_here() to fetch a copy"});
  check_usable(s);
  auto rt = runtime_of(s);
  if (!s->holder->wait(rt->options().rpc_timeout))
    throw TimeoutError(ErrorInfo{ErrorKind::Timeout, rt->name(), "local_value(): the value was not created in time"});
  if (auto err = s->holder->error()) throw_rpc_error(*err);
  return *s->holder;
}

FailureHandlerId on_owner_failure(const RRefStatePtr& s, WorkerFailureHandler handler) {
  if (!handler) throw std::invalid_argument("on_owner_failure: the handler is empty");
  return runtime_of(s)->add_failure_handler(std::move(handler), s->owner);
}

CallbackRunner runner_of(const RRefStatePtr& s) {
  if (auto rt = s->rt.lock())
    if (rt->running()) return rt->callback_runner();
  return {};
}

}  // namespace castor::detail
