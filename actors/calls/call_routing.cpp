// Caller side of a call: register it, send the request, match the reply,
// enforce deadlines.
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/transport/bulk/bulk_path.hpp"
#include "actors/calls/large_payloads.hpp"
#include "actors/calls/delivery.hpp"
#include "actors/runtime/runtime.hpp"
#include "actors/runtime/worker_state.hpp"

namespace castor::detail {

// Note [Direct sends]
// ~~~~~~~~~~~~~~~~~~~
// A call does not pass through our worker actor on its way out. The calling
// thread adds it to the runtime's PendingCalls table, then sends the
// CallRequest straight to the peer's proxy, with our worker actor as the
// sender, so the reply comes back to the actor, which takes the call out of
// the table and completes it. This saves a thread hand-off and a message
// per call, a sizeable share of a round trip on two cores. The table is the
// one structure shared by threads and the actor, hence its own mutex; the
// actor remains the only one that expires calls (sweeps, scheduled when a
// call's deadline is earlier than the next sweep) and fails them when a peer
// dies or we shut down. On the direct lane (B8 of Note [Bulk path]) the
// request goes on the pair's link and the reply completes the call on that
// link's reader thread (deliver_reply), not on the actor: still through the
// table, so the points below hold for both.
//  - The reply cannot beat the registration: the request is sent after add().
//  - A peer that dies between the caller's liveness check and add() is caught
//    by a second check after add(): the actor marks a peer dead before it
//    fails that peer's calls, so one of the two always sees the call.
//  - Calls to ourselves take the same path; the caller copies the arguments
//    first so that a value passed by copy stays a copy without serializing.

namespace {

CallLatencyKind latency_kind_of(const CallRequest& req) {
  if (req.is_remote()) return CallLatencyKind::remote;
  switch (req.kind) {
    case CallKind::method: return CallLatencyKind::method;
    case CallKind::fetch: return CallLatencyKind::to_here;
    default: return CallLatencyKind::rpc;
  }
}

}  // namespace

void Runtime::start_call(WorkerId to, CallRequest&& req, std::chrono::milliseconds timeout, Completion done) {
  auto fail_now = [&](ErrorKind kind, const std::string& why) {
    done(Outcome::failure(make_error(kind, to == rank() ? name() : name_of(to), why)));
  };
  // M3 of Note [World]: a live, connected peer, or ourselves; nothing else.
  auto unreachable = [&] { return to != rank() && !world().peer(to); };
  if (unreachable())
    return fail_now(ErrorKind::Unreachable,
                    "worker " + name_of(to) + " is unreachable (calling '" + req.function + "')");
  auto id = req.id;
  if (pending.add(id, PendingCall{to, req.function, timeout, std::move(done), uint8_t(latency_kind_of(req))}))
    caf::anon_send(actor, sweep_atom::value);
  if (unreachable() || state.load() == RunState::stopped) {
    if (auto call = pending.take(id)) {
      done = std::move(call->done);
      return state.load() == RunState::stopped
                 ? fail_now(ErrorKind::Shutdown, "worker " + name() + " is shut down; cannot call '" + req.function + "'")
                 : fail_now(ErrorKind::Unreachable,
                            "worker " + name_of(to) + " is unreachable (calling '" + req.function + "')");
    }
    return;  // the actor already failed it
  }
  if (rrefs)
    for (auto& a : req.args)
      if (a.contains_rref()) rrefs->fork_for(a, to);  // before the request leaves
  // Inside an autograd context the call records a SendRpcBackward here (a
  // call to ourselves keeps its tensors in the local graph instead).
  auto ctx = req.autograd.context.valid() || !autograd ? req.autograd.context : autograd->current_context();
  if (ctx.valid()) {
    req.autograd.context = ctx;
    if (to != rank()) {
      std::vector<Value*> values;
      for (auto& a : req.args) values.push_back(&a);
      autograd->on_send(ctx, values, to, req.autograd);
    }
  }
  counters.sent.fetch_add(1, std::memory_order_relaxed);
  if (to == rank()) {
    for (auto& a : req.args) a = ctx.valid() ? a.clone_with_graph() : a.deep_copy();
    caf::send_as(actor, actor, std::move(req));
    return;
  }
  if (bulk && bulk->try_send(to, req)) return;  // B8 of Note [Bulk path]
  // The handle of the snapshot checked above: a peer dead since then loses
  // the message, and the actor fails the call (Note [Direct sends]).
  auto peer = world().member(to).handle;
  std::vector<TensorChunk> chunks;
  for (auto& a : req.args) split_large_tensors(a, opts.max_message_bytes, transfer_ids, chunks);
  for (auto& c : chunks) caf::send_as(actor, peer, std::move(c));  // before the request: FIFO per sender
  caf::send_as(actor, peer, std::move(req));
}

void deliver_reply(Runtime& rt, CallReply&& reply, ChunkAssembler* chunks) {
  // Counted once its call is completed (and the callbacks that may make new
  // calls posted): a termination probe that sees it counted also sees what
  // it started (Note [Graceful shutdown]; off the actor nothing else orders them).
  struct CountReceived {
    Runtime& rt;
    ~CountReceived() { rt.counters.received.fetch_add(1, std::memory_order_relaxed); }
  } count{rt};
  auto call = rt.pending.take(reply.id);
  if (!call) return;  // late reply after a timeout or a death: dropped quietly
  rt.stats.latency[call->latency_kind].record(Clock::now() - call->started);
  if (reply.ok) {
    auto err = chunks ? chunks->resolve(reply.result) : std::string();
    if (!err.empty())
      return call->done(Outcome::failure(make_error(ErrorKind::Internal, rt.name(), "reply of a call: " + err)));
    if (reply.autograd.message.valid() && rt.autograd) rt.autograd->on_receive(reply.autograd, {&reply.result}, call->to);
    if (rt.rrefs && reply.result.contains_rref())
      return rt.rrefs->adopt_then(std::move(reply.result), std::move(call->done));  // see Note [RRef protocol]
    call->done(Outcome::success(std::move(reply.result)));
  } else {
    call->done(Outcome::failure(std::move(reply.error)));
  }
}

void handle_reply_impl(worker_pointer self, CallReply&& reply) {
  deliver_reply(*self->state.rt, std::move(reply), &self->state.chunks);
}

void sweep_impl(worker_pointer self) {
  auto* rt = self->state.rt;
  auto now = Clock::now();
  std::optional<Clock::time_point> next;
  for (auto& call : rt->pending.take_expired(now, next)) {
    auto who = rt->name_of(call.to);
    call.done(Outcome::failure(make_error(ErrorKind::Timeout, who,
                                          "call to '" + call.function + "' on worker " + who + " timed out after " +
                                              std::to_string(call.timeout.count()) + " ms")));
  }
  if (rt->autograd)  // backward passes waiting with a deadline (Note [Graph task watchdog])
    if (auto due = rt->autograd->sweep(now); due && (!next || *due < *next)) next = due;
  // One timer chain: a sweep asked for early (a sooner deadline) schedules a
  // timer only if it comes before the one already planned.
  auto& planned = self->state.sweep_planned;
  if (planned && *planned <= now) planned.reset();  // this is that sweep (or later)
  if (next && (!planned || *next < *planned)) {
    planned = *next + std::chrono::milliseconds(1);
    self->delayed_send(self, std::chrono::duration_cast<std::chrono::microseconds>(*planned - now), sweep_atom::value);
  }
}

void fail_pending_impl(worker_pointer self, const std::function<bool(const PendingCall&)>& which,
                       const std::function<ErrorInfo(const PendingCall&)>& why) {
  for (auto& call : self->state.rt->pending.take_if(which)) call.done(Outcome::failure(why(call)));
}

}  // namespace castor::detail
