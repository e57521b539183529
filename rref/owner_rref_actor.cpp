// OwnerRRef actor: fork accounting, fetches, serialized method calls.
#include "rref/owner_rref_actor.hpp"

#include <deque>
#include <unordered_map>
#include <unordered_set>

#include <caf/io/middleman.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/hooks/autograd_hooks.hpp"
#include "actors/hooks/worker_services.hpp"
#include "rref/rref_counters.hpp"

namespace castor::detail {
namespace {

template <class List>
struct owner_broker_of;
template <class... Sigs>
struct owner_broker_of<caf::detail::type_list<Sigs...>> {
  using type = caf::io::typed_broker<Sigs...>;
};
using owner_broker = owner_broker_of<owner_rref_actor::signatures>::type;

struct owner_state {
  static inline const char* name = "castor.owner_rref";

  WorkerServices* rt = nullptr;
  RRefId id;
  std::shared_ptr<Holder> holder;
  std::shared_ptr<OwnerStats> stats;
  std::function<void()> on_gone;

  // Fork accounting (see Note [RRef protocol]); changed by add/del/peer_down.
  std::unordered_map<ForkId, WorkerId> forks;  // live forks and the worker holding each
  std::unordered_set<ForkId> deleted;          // deleted forks: a late or repeated add is ignored
  int64_t local_refs = 0;                      // owner-side handles on this worker
  bool created = false;  // the creating operation arrived: until then nothing may end us

  // Method calls (see Note [Remote objects]); changed by OwnerCall/released.
  std::deque<OwnerCall> queue;  // waiting for the object, in arrival order
  int running = 0;              // methods running now (at most 1 unless concurrent)
  bool wake_on_set = false;     // a pump is registered for when the value is set
};

using owner_pointer = caf::stateful_actor<owner_state, owner_broker>*;

// Note [Remote objects]
// ~~~~~~~~~~~~~~~~~~~~~
// Calls on one object run one at a time in arrival order: the owner actor
// keeps them in a queue and hands the next to the executor only when the
// previous method has returned (`released`). So user classes need no mutex,
// and a method that blocks in a nested call holds only its own object: other
// objects have other owner actors, and executor threads blocked in nested
// calls do not count against the pool. A method returning a Future releases
// the object when it returns; its reply goes out when the Future completes.
// Classes registered with .concurrent() skip the queue.

RRefCounters& counters(owner_pointer self) { return rref_counters(*self->state.rt); }

void maybe_end(owner_pointer self) {
  auto& st = self->state;
  if (!st.created || !st.forks.empty() || st.local_refs > 0 || !st.queue.empty() || st.running > 0) return;
  counters(self).owners.fetch_sub(1);
  if (st.on_gone) st.on_gone();
  st.on_gone = nullptr;
  self->quit();
}

ErrorInfo no_value_error(owner_pointer self, const ErrorInfo& cause) {
  auto* rt = self->state.rt;
  return make_error(cause.kind, rt->name(),
                    "RRef " + to_string(self->state.id) + " owned by worker " + rt->name() +
                        " has no value: the call that was to create it failed: " + cause.message);
}

void run_method(owner_pointer self, OwnerCall&& call) {
  auto& st = self->state;
  auto* rt = st.rt;
  auto fail = [&](ErrorKind k, const std::string& msg) { call.done(Outcome::failure(make_error(k, rt->name(), msg))); };
  if (auto err = st.holder->error()) return fail(err->kind, no_value_error(self, *err).message);
  if (!st.holder->holds_object())
    return fail(ErrorKind::Lookup, "worker " + rt->name() + ": RRef " + to_string(st.id) +
                                       " holds a value, not an object; it has no method '" + call.request.function +
                                       "'");
  const auto* cls = st.holder->cls();
  const auto* method = cls->method(call.request.function);
  if (!method)
    return fail(ErrorKind::Lookup,
                "worker " + rt->name() + ": class '" + cls->name + "' has no method '" + call.request.function + "'");
  ++st.running;
  auto object = st.holder->object();
  auto me = caf::actor_cast<owner_rref_actor>(self);
  auto fn = cls->name + "." + call.request.function;
  Completion done = std::move(call.done);
  if (call.result_holder) {
    // remote() of a method: the result becomes the new RRef's value.
    done = [result = call.result_holder, ack = std::move(done)](Outcome o) {
      if (o.ok)
        result->set_value(std::move(o.value));
      else
        result->set_error(o.error);
      ack(Outcome::success(Value()));
    };
  }
  auto ctx = call.request.autograd.context;
  bool accepted = rt->post([rt, me, object, method, fn, ctx, args = std::move(call.request.args), done]() mutable {
    ContextScope scope(rt->autograd(), ctx);  // nested calls join the caller's autograd context
    try {
      method->invoke(object.get(), std::move(args), done);
    } catch (const CallFailure& f) {
      done(Outcome::failure(make_error(f.kind, rt->name(), "worker " + rt->name() + ": " + f.message)));
    } catch (const std::exception& e) {
      done(Outcome::failure(
          make_error(ErrorKind::Remote, rt->name(), "worker " + rt->name() + ": method '" + fn + "' raised: " + e.what())));
    } catch (...) {
      done(Outcome::failure(make_error(ErrorKind::Remote, rt->name(),
                                       "worker " + rt->name() + ": method '" + fn + "' raised an unknown exception")));
    }
    caf::anon_send(me, released_atom::value);  // the object is free again
  });
  if (!accepted) {
    --st.running;
    fail(ErrorKind::Remote, "worker " + rt->name() + " cannot run '" + fn + "': its executor is saturated or stopped");
  }
}

void pump(owner_pointer self) {
  auto& st = self->state;
  if (st.queue.empty()) return;
  if (!st.holder->is_set()) {
    if (!st.wake_on_set) {
      st.wake_on_set = true;
      auto me = caf::actor_cast<owner_rref_actor>(self);
      st.holder->on_set([me] { caf::anon_send(me, ready_atom::value); });
    }
    return;
  }
  bool concurrent = st.holder->cls() && st.holder->cls()->concurrent;
  while (!st.queue.empty() && (st.running == 0 || concurrent)) {
    auto call = std::move(st.queue.front());
    st.queue.pop_front();
    run_method(self, std::move(call));
  }
}

void fetch(owner_pointer self, OwnerCall&& call) {
  auto& st = self->state;
  auto* rt = st.rt;
  auto shared = rref_counters_ptr(*rt);
  shared->pending_fetches.fetch_add(1);
  auto id = st.id;
  auto rt_name = rt->name();
  st.holder->on_set([holder = st.holder, done = std::move(call.done), shared, id, rt_name]() {
    shared->pending_fetches.fetch_sub(1);
    if (auto err = holder->error()) {
      done(Outcome::failure(make_error(err->kind, rt_name,
                                       "RRef " + to_string(id) + " owned by worker " + rt_name +
                                           " has no value: the call that was to create it failed: " + err->message)));
    } else if (holder->holds_object()) {
      done(Outcome::failure(make_error(ErrorKind::Type, rt_name,
                                       "to_here on RRef " + to_string(id) + " of class '" + holder->cls()->name +
                                           "': an object stays on its owner, worker " + rt_name +
                                           " (call its methods instead)")));
    } else {
      done(Outcome::success(holder->value()));
    }
  });
}

owner_rref_actor::behavior_type owner_behavior(owner_pointer self, WorkerServices* rt, RRefId id,
                                               std::shared_ptr<Holder> holder, std::shared_ptr<OwnerStats> stats,
                                               std::function<void()> on_gone) {
  auto& st = self->state;
  st.rt = rt;
  st.id = id;
  st.holder = std::move(holder);
  st.stats = std::move(stats);
  st.on_gone = std::move(on_gone);
  counters(self).owners.fetch_add(1);
  return {
      [self](add_fork_atom, ForkId fork, WorkerId holder) {
        auto& st = self->state;
        if (st.deleted.count(fork) || st.forks.count(fork)) return;  // late, repeated or already gone
        st.forks.emplace(fork, holder);
        counters(self).forks.fetch_add(1);
        st.stats->forks.fetch_add(1);
      },
      [self](del_fork_atom, ForkId fork) {
        auto& st = self->state;
        st.deleted.insert(fork);
        if (st.forks.erase(fork)) {
          counters(self).forks.fetch_sub(1);
          st.stats->forks.fetch_sub(1);
        }
        maybe_end(self);
      },
      [self](local_ref_atom, int32_t delta) {
        self->state.local_refs += delta;
        maybe_end(self);
      },
      [self](created_atom) {
        self->state.created = true;
        maybe_end(self);
      },
      [self](OwnerCall& call) {
        if (call.request.kind == CallKind::fetch) return fetch(self, std::move(call));
        auto& st = self->state;
        st.queue.push_back(std::move(call));
        pump(self);
      },
      [self](released_atom) {
        --self->state.running;
        pump(self);
        maybe_end(self);
      },
      [self](ready_atom) {
        self->state.wake_on_set = false;
        pump(self);
      },
      [self](peer_down_atom, WorkerId rank) {
        auto& st = self->state;
        for (auto it = st.forks.begin(); it != st.forks.end();) {
          if (it->second == rank) {
            st.deleted.insert(it->first);
            counters(self).forks.fetch_sub(1);
            st.stats->forks.fetch_sub(1);
            it = st.forks.erase(it);
          } else {
            ++it;
          }
        }
        if (!st.created && st.id.worker() == rank) {
          // The creator died before its request arrived: nothing will create us.
          st.holder->set_error(make_error(ErrorKind::Unreachable, st.rt->name_of(rank),
                                          "worker " + st.rt->name_of(rank) + " died before creating the value"));
          st.created = true;
        }
        maybe_end(self);
      },
  };
}

}  // namespace

owner_rref_actor spawn_owner_rref(WorkerServices& rt, RRefId id, std::shared_ptr<Holder> holder,
                                  std::shared_ptr<OwnerStats> stats, std::function<void()> on_gone) {
  return rt.system().middleman().spawn_broker(owner_behavior, &rt, id, std::move(holder), std::move(stats),
                                             std::move(on_gone));
}

}  // namespace castor::detail
