// OwnerRRef actor: fork accounting (delegated to OwnerForks), serialized
// method calls.
#include "rref/owner_rref_actor.hpp"

#include <deque>
#include <optional>

#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/calls/serial_jobs.hpp"
#include "actors/calls/thread_context.hpp"
#include "actors/hooks/autograd_hooks.hpp"
#include "actors/hooks/worker_services.hpp"
#include "rref/rref_counters.hpp"
#include "rref/rref_runtime.hpp"

namespace castor::detail {
namespace {

struct owner_state {
  static inline const char* name = "castor.owner_rref";

  WorkerServices* rt = nullptr;
  RRefId id;
  std::shared_ptr<Holder> holder;
  std::shared_ptr<RRefCounters> counters;  // kept alive for `forks`'s gauges
  std::shared_ptr<OwnerStats> stats;
  std::function<void()> on_gone;

  // Fork accounting (see Note [RRef protocol]): changed only by the
  // OwnerEvents the RRef context sends; it says when the value may end.
  // Taken over from the context's slot (Note [Light owners]).
  std::shared_ptr<OwnerForks> forks;

  // Method calls (see Note [Remote objects]): queued by OwnerCall, handed
  // out by pump, finished by released; at most one runs unless the class is
  // concurrent.
  SerialJobs<OwnerCall> calls;
  bool wake_on_set = false;  // a pump is registered for when the value is set
};

// An event-based actor that runs where its messages arrive (Note [Actors run
// where their messages arrive]): a method call that the context hands on
// runs it on the context's thread, and a method's end on the executor thread
// that ran it.
using owner_pointer = owner_rref_actor::stateful_pointer<owner_state>;

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

// Note [Methods run on arrival]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Handing a method call to the executor costs a thread wake, and on a busy
// host that thread then waits for a core: a parameter server's round paid it
// for every push, between the link's reader and the method that only stores
// the push (and, on the round's last push, runs the round's pass and replies
// to every trainer). A class may therefore mark a method that is short and
// never waits with CASTOR_CLASS(T).runs_on_arrival("m"):
//  M1 It runs on the thread that runs the owner actor when the object is
//     free: the link's reader that delivered the call (the usual case),
//     CAF's thread for a call that came through BASP, or the executor thread
//     whose method just released the object. It still runs one at a time
//     with the object's other calls, in arrival order (Note [Remote
//     objects]); the object is free again when it returns.
//  M2 It never waits: the thread may be the reader that would read the
//     awaited reply, and a reader that waits holds every link into its
//     worker. A Future wait inside it fails the call (WaitGuard), naming the
//     worker and the method; then() is how it continues later.
//  M3 Its replies leave from that thread: a Future it returns, or completes
//     for an earlier call (a round's last push completes every trainer's),
//     replies there and then, as on an executor thread (WR5 of Note [Waiting
//     for a reply]). A reader writes a small frame itself only when the
//     socket has room for it, and hands a large one to the link's writer
//     (B8 of Note [Bulk path]), so no reply makes it wait either.
//  M4 It is the worker's user code as on the executor: current_worker() is
//     its worker, a call it starts joins the caller's autograd context, an
//     exception fails the call naming the method, and once the executor has
//     stopped (teardown) it is refused, as a posted call is (the worker
//     "is shutting down").
//  M5 It is an exception to D3 of Note [Actors run where their messages
//     arrive] that the class's author opts into, one method at a time.
//     Measured with the parameter server's update on a 2-core VM
//     (bench/README.md): the server's threads switched 4,330 times in 2 s
//     against 10,600, and spent 169 us of CPU a round against 213;
//     samples/s stayed within the VM's spread (the trainers' watch takes
//     the CPU freed, and a round's hops between processes remain).

// The value ends when the protocol allows it (OwnerForks::may_end: created,
// no fork, no local handle) and no method call is queued or running.
void maybe_end(owner_pointer self) {
  auto& st = self->state;
  if (!st.forks->may_end() || !st.calls.idle()) return;
  st.counters->owners.fetch_sub(1);
  st.counters->owner_actors.fetch_sub(1);
  if (st.on_gone) st.on_gone();
  st.on_gone = nullptr;
  self->quit();
}

// Hands a method call to the executor, or runs it here (Note [Methods run
// on arrival]). Returns whether the call still holds the object: false when
// it is over already (it failed at once, or ran here), and then the object
// is free again.
bool run_method(owner_pointer self, OwnerCall&& call) {
  auto& st = self->state;
  auto* rt = st.rt;
  auto fail = [rt](Completion& done, ErrorKind k, const std::string& msg) {
    done(Outcome::failure(make_error(k, rt->name(), msg)));
    return false;
  };
  if (auto err = st.holder->error()) return fail(call.done, err->kind, no_value_error(st.id, rt->name(), *err).message);
  if (!st.holder->holds_object()) {
    call.done(Outcome::failure(not_an_object_error(st.id, rt->name(), call.request.function)));
    return false;
  }
  const auto* cls = st.holder->cls();
  const auto* method = cls->method(call.request.function);
  if (!method)
    return fail(call.done, ErrorKind::Lookup,
                "worker " + rt->name() + ": class '" + cls->name + "' has no method '" + call.request.function + "'");
  auto object = st.holder->object();
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
  auto invoke = [rt, object, method, fn, ctx = call.request.autograd.context](std::vector<Value>&& args,
                                                                              const Completion& reply) {
    ContextScope scope(rt->autograd(), ctx);  // nested calls join the caller's autograd context
    try {
      method->invoke(object.get(), std::move(args), reply);
    } catch (...) {
      reply(Outcome::failure(error_from_exception(std::current_exception(), rt->name(), "method '" + fn + "'")));
    }
  };
  if (method->on_arrival) {
    bool ran = rt->run_here([&] {
      const ArrivalMethod running{&rt->name(), &fn};
      ArrivalMethodScope marked(running);  // M2, M3
      invoke(std::move(call.request.args), done);
    });
    if (!ran) fail(done, ErrorKind::Shutdown, "worker " + rt->name() + " cannot run '" + fn + "': it is shutting down");
    return false;
  }
  auto me = caf::actor_cast<owner_rref_actor>(self);
  bool accepted = rt->post([invoke, life = rt->lifetime(), me, args = std::move(call.request.args), done]() mutable {
    invoke(std::move(args), done);
    // The object is free again. After the invoke's scope: the owner (and
    // what it wakes) may run on this thread now, and must not see the
    // caller's autograd context as its own.
    deliver_while_alive(life, me, released_atom::value);
  });
  if (!accepted)
    return fail(done, ErrorKind::Remote,
                "worker " + rt->name() + " cannot run '" + fn + "': its executor is saturated or stopped");
  return true;
}

void pump(owner_pointer self) {
  auto& st = self->state;
  if (st.calls.queued() == 0) return;
  if (!st.holder->is_set()) {
    if (!st.wake_on_set) {
      st.wake_on_set = true;
      auto me = caf::actor_cast<owner_rref_actor>(self);
      st.holder->on_set([life = st.rt->lifetime(), me] { deliver_while_alive(life, me, ready_atom::value); });
    }
    return;
  }
  bool concurrent = st.holder->cls() && st.holder->cls()->concurrent;
  while (auto call = st.calls.next(concurrent ? 0 : 1))
    if (!run_method(self, std::move(*call))) st.calls.finished();
}

owner_rref_actor::behavior_type owner_behavior(owner_pointer self, WorkerServices* rt, RRefId id,
                                               std::shared_ptr<Holder> holder, std::shared_ptr<OwnerStats> stats,
                                               std::shared_ptr<OwnerForks> forks, std::function<void()> on_gone) {
  auto& st = self->state;
  st.rt = rt;
  st.id = id;
  st.holder = std::move(holder);
  st.stats = std::move(stats);
  st.on_gone = std::move(on_gone);
  st.counters = rref_counters_ptr(*rt);
  st.forks = std::move(forks);
  st.counters->owner_actors.fetch_add(1);
  return {
      [self](const OwnerEvent& e) {
        auto& st = self->state;
        apply_owner_event(*st.rt, *st.forks, *st.holder, e);
        maybe_end(self);
      },
      [self](OwnerCall& call) {
        self->state.calls.push(std::move(call));
        pump(self);
        maybe_end(self);  // a call that ran on arrival freed the object already
      },
      [self](released_atom) {
        self->state.calls.finished();
        pump(self);
        maybe_end(self);
      },
      [self](ready_atom) {
        self->state.wake_on_set = false;
        pump(self);
        maybe_end(self);
      },
  };
}

}  // namespace

owner_rref_actor spawn_owner_rref(caf::local_actor* parent, WorkerServices& rt, RRefId id,
                                  std::shared_ptr<Holder> holder, std::shared_ptr<OwnerStats> stats,
                                  std::shared_ptr<OwnerForks> forks, std::function<void()> on_gone) {
  // lazy_init: the call or event it was spawned for starts it, after the
  // context's handler (D2 of Note [Actors run where their messages arrive]).
  return parent->spawn<caf::lazy_init>(owner_behavior, &rt, id, std::move(holder), std::move(stats),
                                       std::move(forks), std::move(on_gone));
}

void apply_owner_event(WorkerServices& rt, OwnerForks& forks, Holder& holder, const OwnerEvent& e) {
  auto forks_before = forks.forks();
  auto outcome = forks.apply(e);
  if (e.kind == OwnerEvent::Kind::peer_down && forks.forks() < forks_before)
    rt.note_released(e.worker, "rref_forks", int64_t(forks_before - forks.forks()));
  if (outcome == OwnerForks::Outcome::creator_died) {
    rt.note_released(e.worker, "rref_values_never_created");
    auto who = rt.name_of(e.worker);
    holder.set_error(make_error(ErrorKind::Unreachable, who, "worker " + who + " died before creating the value"));
  }
}

}  // namespace castor::detail
