// Caller side of a call: send the request, match the reply, enforce timeouts.
#include <caf/typed_event_based_actor.hpp>

#include "actors/runtime.hpp"
#include "actors/worker_state.hpp"

namespace castor::detail {

// Note [Direct sends]
// ~~~~~~~~~~~~~~~~~~~
// A call to a peer does not pass through our worker actor on its way out: the
// calling thread first registers the call with the actor (OutgoingCall, for
// the reply, the timeout and the peer's death), then sends the CallRequest
// straight to the peer's proxy with the actor as sender. This saves one
// thread hand-off per call, which on two cores is a quarter of a round trip.
// The reply cannot overtake the registration: it can only be produced after
// the peer received the request, which was sent after the registration was
// already in our mailbox, and a mailbox is FIFO. Calls to ourselves still go
// through the actor, which copies their arguments.
namespace {

void schedule_sweep(worker_pointer self, Clock::time_point at) {
  auto& st = self->state;
  if (st.sweep_at && *st.sweep_at <= at) return;
  st.sweep_at = at;
  auto delay = at - Clock::now();
  if (delay < Clock::duration::zero()) delay = Clock::duration::zero();
  self->delayed_send(self, std::chrono::duration_cast<std::chrono::microseconds>(delay) +
                               std::chrono::milliseconds(1),
                     sweep_atom::value);
}

ErrorInfo shutdown_error(const Runtime& rt) {
  return make_error(ErrorKind::Shutdown, rt.name, "worker " + rt.name + " is shut down; no further calls");
}

}  // namespace

void start_call_impl(worker_pointer self, OutgoingCall&& call) {
  auto& st = self->state;
  auto* rt = st.rt;
  auto fail = [&](ErrorInfo e) { call.done(Outcome::failure(std::move(e))); };
  if (rt->state.load() == RunState::stopped) return fail(shutdown_error(*rt));
  auto to = call.to;
  if (to < 0 || size_t(to) >= st.peers.size())
    return fail(make_error(ErrorKind::Lookup, rt->name, "unknown worker rank " + std::to_string(to)));
  if (to != rt->rank && !peer_usable(self, to))
    return fail(make_error(ErrorKind::Unreachable, rt->name_of(to),
                           "worker " + rt->name_of(to) + " is unreachable (calling '" + call.function + "')"));
  auto deadline = Clock::now() + call.timeout;
  auto dl = st.deadlines.emplace(deadline, call.id);
  st.pending.emplace(call.id, PendingCall{to, call.function, call.timeout, std::move(call.done), dl});
  schedule_sweep(self, deadline);
  if (call.request) {
    // A call to ourselves is not serialized: copy the arguments so that a
    // value passed by copy stays a copy.
    rt->counters.sent.fetch_add(1, std::memory_order_relaxed);
    for (auto& a : call.request->args) a = a.deep_copy();
    self->send(self, std::move(*call.request));
  }
}

void handle_reply_impl(worker_pointer self, CallReply&& reply) {
  auto& st = self->state;
  st.rt->counters.received.fetch_add(1, std::memory_order_relaxed);
  auto it = st.pending.find(reply.id);
  if (it == st.pending.end()) return;  // late reply after a timeout or a death: dropped quietly
  auto done = std::move(it->second.done);
  st.deadlines.erase(it->second.deadline);
  st.pending.erase(it);
  if (reply.ok) {
    auto err = st.chunks.resolve(reply.result);
    if (!err.empty()) {
      done(Outcome::failure(make_error(ErrorKind::Internal, st.rt->name, "reply of a call: " + err)));
      return;
    }
  }
  if (reply.ok)
    done(Outcome::success(std::move(reply.result)));
  else
    done(Outcome::failure(std::move(reply.error)));
}

void sweep_impl(worker_pointer self) {
  auto& st = self->state;
  st.sweep_at.reset();
  auto now = Clock::now();
  while (!st.deadlines.empty() && st.deadlines.begin()->first <= now) {
    auto id = st.deadlines.begin()->second;
    st.deadlines.erase(st.deadlines.begin());
    auto it = st.pending.find(id);
    if (it == st.pending.end()) continue;
    auto call = std::move(it->second);
    st.pending.erase(it);
    auto who = st.rt->name_of(call.to);
    call.done(Outcome::failure(make_error(ErrorKind::Timeout, who,
                                          "call to '" + call.function + "' on worker " + who + " timed out after " +
                                              std::to_string(call.timeout.count()) + " ms")));
  }
  if (!st.deadlines.empty()) schedule_sweep(self, st.deadlines.begin()->first);
}

void fail_pending_impl(worker_pointer self, std::function<bool(const PendingCall&)> which,
                       std::function<ErrorInfo(const PendingCall&)> why) {
  auto& st = self->state;
  std::vector<PendingCall> failed;
  for (auto it = st.pending.begin(); it != st.pending.end();) {
    if (which(it->second)) {
      st.deadlines.erase(it->second.deadline);
      failed.push_back(std::move(it->second));
      it = st.pending.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& call : failed) call.done(Outcome::failure(why(call)));
}

}  // namespace castor::detail
