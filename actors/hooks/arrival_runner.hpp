// Actors that run on the thread their message arrives on: Note [Actors run
// where their messages arrive] below.
#pragma once

#include <atomic>
#include <chrono>
#include <utility>

#include <caf/abstract_actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/message_id.hpp>
#include <caf/send.hpp>

namespace castor::detail {

// Note [Actors run where their messages arrive]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The autograd context and graph task actors and the RRef context actor are
// ordinary event-based CAF actors, not brokers (Note [Where actors run]). A
// message for one of them that comes from a thread of castor's own -- a
// link's reader with a gradient or an RRef control message, the caller in
// backward() or dropping an RRef, an executor thread with a drained graph
// -- is handed over by `deliver_here`. When that message wakes the
// actor (its mailbox was empty and no thread had it), the delivering thread
// runs the actor at once, as a CAF execution unit of its own (an
// ArrivalRunner on its stack), and so every actor that handler wakes in
// turn: a graph task it spawns, the gradient it passes on, its TaskEnded.
// A gradient that reaches a worker is thus run by the thread that read it,
// where a broker cost a wake of the multiplexer's thread through its pipe
// (P2) and a scheduled actor a wake of a scheduler thread, which costs more.
//  D1 An actor still runs on one thread at a time and takes its messages in
//     order: CAF hands a woken actor to exactly one execution unit, the one
//     named by the enqueue that unblocked its mailbox, as it does for its
//     own threads. A message for an actor that some thread is running only
//     joins its mailbox.
//  D2 A runner runs its jobs one after another, never one inside another:
//     an actor woken from a handler waits in the runner's queue until the
//     running actor has returned. A delivery on a thread that is already
//     running a runner (from a handler) joins that runner's queue.
//  D3 What runs this way never blocks and never runs user code (P1 of Note
//     [Where actors run]): nodes that are not light go to the executor. The
//     one exception is a method its class marked runs_on_arrival, short and
//     never waiting (M2 enforces the second): Note [Methods run on arrival].
//  D4 CAF's own threads (the multiplexer, the scheduler's, the clock) are
//     execution units already; a delivery from one of them (a gradient or an
//     RRef control message that came through BASP before the lane opened, a
//     peer's death, the watchdog's sweep) is scheduled as CAF schedules any event-based actor:
//     a scheduler thread's wake, dearer than the multiplexer's pipe was for a
//     broker, paid only off the lane.
//  D5 A spawn on a thread of castor's own leaves CAF's logger referenced
//     in that thread's locals, and the actor system's end waits for every
//     such reference: the outermost delivery drops it when its queue is
//     empty.
//  D6 CAF leaves an actor's execution unit set after it ran, and the runner
//     lives on its thread's stack: such an actor never sends (nor answers a
//     request: its interface is reacts_to only) except from its own
//     handlers, where CAF sets the unit anew.
//  D7 Whichever thread runs them, the handlers see libtorch's default
//     autograd state and no distributed autograd context of castor's (a
//     caller's NoGradGuard, InferenceMode or castor::autograd::Context, an
//     executor's ContextScope, stays its own, so a call a handler starts is
//     never recorded in the context of the thread that delivered): the
//     outermost delivery sets both around its queue and restores them.
//  D8 A worker that stops (AutogradRuntime::stop, RRefRuntime::stop) waits
//     for the deliveries running on its threads, and later ones go to CAF's
//     scheduler: an actor that ends must end before its actor system does,
//     and CAF joins only its own threads. An ArrivalGate keeps that count;
//     a layer that resets an actor's handle at its stop seals the gate
//     first, so that no delivery reads the handle meanwhile.
//  D9 A delivery that may come from under a lock of castor's -- the end of
//     an RRef handle, which happens wherever its last copy dies, or a fork
//     registered while a reply is encoded -- must not run the actor inside
//     the caller's frame, whose handlers might take that lock again: it is
//     posted (post_here), queued behind the running job on a thread that is
//     running a runner and scheduled by CAF elsewhere.

/// Delivers `msg` to `dest` (D1-D5): the delivering thread runs `dest` now
/// if the message wakes it, unless it is one of CAF's threads.
void deliver_here(caf::actor_system& sys, caf::abstract_actor* dest, caf::mailbox_element_ptr msg);

/// The same, for a message made of `xs` (anonymous, like caf::anon_send).
template <class Handle, class... Ts>
void deliver_here(caf::actor_system& sys, const Handle& dest, Ts&&... xs) {
  if (!dest) return;
  deliver_here(sys, caf::actor_cast<caf::abstract_actor*>(dest),
               caf::make_mailbox_element(nullptr, caf::make_message_id(), {}, std::forward<Ts>(xs)...));
}

/// Whether this thread is running a runner now (D3: what it runs must not
/// block, so a send from there never waits, e.g. for a link's dial).
bool running_arrivals();

/// D9: like deliver_here, but `dest` never runs inside the caller's frame:
/// a thread that is running a runner queues it behind the running job,
/// another thread has it scheduled by CAF.
void post_here(caf::actor_system& sys, caf::abstract_actor* dest, caf::mailbox_element_ptr msg);

template <class Handle, class... Ts>
void post_here(caf::actor_system& sys, const Handle& dest, Ts&&... xs) {
  if (!dest) return;
  post_here(sys, caf::actor_cast<caf::abstract_actor*>(dest),
            caf::make_mailbox_element(nullptr, caf::make_message_id(), {}, std::forward<Ts>(xs)...));
}

/// D8: the deliveries of one layer (autograd, RRefs) to its actors, counted
/// while they run so that its stop can wait for them. Once closed, a
/// delivery goes through CAF's scheduler; once sealed, it is dropped (its
/// actors ended) and nothing reads the handle it names, nor `sys`.
class ArrivalGate {
 public:
  /// deliver_here, counted.
  template <class Handle, class... Ts>
  void deliver(caf::actor_system* sys, const Handle& dest, Ts&&... xs) {
    pass_on(&deliver_here, sys, dest, std::forward<Ts>(xs)...);
  }
  /// D9: post_here, counted and closed as deliver is.
  template <class Handle, class... Ts>
  void post(caf::actor_system* sys, const Handle& dest, Ts&&... xs) {
    pass_on(&post_here, sys, dest, std::forward<Ts>(xs)...);
  }
  /// Runs `f` unless sealed, counted as a delivery (what reads a handle
  /// that the sealing thread resets after).
  template <class F>
  void guarded(F&& f) {
    pass([&](bool) { f(); });
  }
  /// Later deliveries go through CAF's scheduler.
  void close();
  bool closed() const { return state_.load() != kOpen; }
  /// Closes, then waits up to `bound` for the deliveries running now.
  void close_and_wait(std::chrono::milliseconds bound);
  /// Later deliveries are dropped; waits up to `bound` for those running.
  void seal_and_wait(std::chrono::milliseconds bound);

 private:
  static constexpr int kOpen = 0, kClosed = 1, kSealed = 2;
  using Handover = void (*)(caf::actor_system&, caf::abstract_actor*, caf::mailbox_element_ptr);
  template <class Handle, class... Ts>
  void pass_on(Handover open_way, caf::actor_system* sys, const Handle& dest, Ts&&... xs) {
    pass([&](bool open) {  // `dest` is read only inside: its owner resets it once sealed
      if (!dest) return;
      if (!open) return caf::anon_send(dest, std::forward<Ts>(xs)...);
      open_way(*sys, caf::actor_cast<caf::abstract_actor*>(dest),
               caf::make_mailbox_element(nullptr, caf::make_message_id(), {}, std::forward<Ts>(xs)...));
    });
  }
  template <class F>
  void pass(F&& f) {
    running_.fetch_add(1);  // before the state is read: a sealer waits for us, or we see the seal
    struct Done {
      std::atomic<int>& n;
      ~Done() { n.fetch_sub(1); }
    } done{running_};
    int state = state_.load();
    if (state != kSealed) f(state == kOpen);
  }
  void wait_running(std::chrono::milliseconds bound);
  std::atomic<int> running_{0};
  std::atomic<int> state_{kOpen};
};

}  // namespace castor::detail
