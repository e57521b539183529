// What the worker actor does with a message it cannot use: a message struct
// that arrived malformed, or a message of a type it does not handle. Each is
// logged naming the peer and dropped; the worker keeps serving. See
// Note [Hostile input] (H2-H4) in messages/wire_checks.hpp.
#include <cstdio>

#include <caf/deep_to_string.hpp>
#include <caf/message_view.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/calls/call_dispatch.hpp"
#include "actors/runtime/runtime.hpp"
#include "actors/runtime/worker_state.hpp"

namespace castor::detail {
namespace {

/// "worker1" for a peer's actor (or any actor of its actor system), else a
/// description of the unknown sender. `claimed` is a rank the message names
/// itself (used only when the message came without a sender, e.g. replies).
std::string sender_name(worker_pointer self, std::optional<WorkerId> claimed = std::nullopt) {
  auto& st = self->state;
  auto src = self->current_sender();
  if (src) {
    auto it = st.rank_by_addr.find(caf::actor_addr{src->get()->address()});
    if (it != st.rank_by_addr.end()) return "worker " + st.rt->name_of(it->second);
    for (size_t r = 0; r < st.peers.size(); ++r)
      if (st.peers[r] && st.peers[r]->handle && st.peers[r]->handle.node() == src->node())
        return "worker " + st.rt->name_of(WorkerId(r));
    if (src->node() == self->node()) return "this worker (" + st.rt->name() + ")";
    return "an unknown sender (actor " + std::to_string(src->id()) + " on node " + caf::to_string(src->node()) + ")";
  }
  if (claimed && *claimed >= 0 && size_t(*claimed) < st.peers.size())
    return "worker " + st.rt->name_of(*claimed) + " (as the message says; it came without a sender)";
  return "an anonymous sender";
}

void log_dropped(worker_pointer self, const char* type, const std::string& from, const std::string& why) {
  self->state.rt->stats.count(MessageType::malformed);
  std::fprintf(stderr, "castor[%s]: dropped a malformed %s from %s: %s\n", self->state.rt->name().c_str(), type,
               from.c_str(), why.c_str());
  std::fflush(stderr);
}

}  // namespace

bool drop_malformed(worker_pointer self, CallRequest& req) {
  if (req.malformed.empty()) return false;
  auto* rt = self->state.rt;
  auto from = sender_name(self, req.caller);
  log_dropped(self, "castor::CallRequest", from, req.malformed);
  // Counted as handled (H4); a request whose id was readable gets its error
  // now instead of a timeout.
  rt->counters.received.fetch_add(1, std::memory_order_relaxed);
  if (!req.id.valid()) return true;
  rt->counters.in_flight.fetch_add(1, std::memory_order_acq_rel);
  make_replier(rt, self->current_sender(), req)(Outcome::failure(make_error(
      ErrorKind::Internal, rt->name(),
      "worker " + rt->name() + " could not decode a call request from " + from + ": " + req.malformed)));
  return true;
}

bool drop_malformed(worker_pointer self, CallReply& reply) {
  if (reply.malformed.empty()) return false;
  auto* rt = self->state.rt;
  rt->counters.received.fetch_add(1, std::memory_order_relaxed);
  auto call = reply.id.valid() ? rt->pending.take(reply.id) : std::nullopt;
  auto from = sender_name(self, call ? std::optional<WorkerId>(call->to) : std::nullopt);
  log_dropped(self, "castor::CallReply", from, reply.malformed);
  if (call)
    call->done(Outcome::failure(make_error(ErrorKind::Internal, rt->name_of(call->to),
                                           "the reply of '" + call->function + "' from " + from +
                                               " could not be decoded: " + reply.malformed)));
  return true;
}

bool drop_malformed(worker_pointer self, TensorChunk& chunk) {
  if (chunk.malformed.empty()) return false;
  // The message that refers to this transfer fails on its own (unknown transfer).
  log_dropped(self, "castor::TensorChunk", sender_name(self), chunk.malformed);
  return true;
}

bool drop_malformed(worker_pointer self, RRefControl& msg) {
  if (msg.malformed.empty()) return false;
  log_dropped(self, "castor::RRefControl", sender_name(self, msg.holder), msg.malformed);
  return true;
}

bool drop_malformed(worker_pointer self, BackwardGrad& grad) {
  if (grad.malformed.empty()) return false;
  self->state.rt->counters.received.fetch_add(1, std::memory_order_relaxed);
  log_dropped(self, "castor::BackwardGrad", sender_name(self, grad.from), grad.malformed);
  return true;
}

bool drop_malformed(worker_pointer self, BackwardDone& done) {
  if (done.malformed.empty()) return false;
  self->state.rt->counters.received.fetch_add(1, std::memory_order_relaxed);
  log_dropped(self, "castor::BackwardDone", sender_name(self), done.malformed);
  return true;
}

bool drop_malformed(worker_pointer self, ContextControl& msg) {
  if (msg.malformed.empty()) return false;
  self->state.rt->counters.received.fetch_add(1, std::memory_order_relaxed);
  log_dropped(self, "castor::ContextControl", sender_name(self, msg.from), msg.malformed);
  return true;
}

caf::result<caf::message> drop_unexpected(worker_pointer self, caf::message_view& x) {
  self->state.rt->stats.count(MessageType::unexpected);
  auto text = caf::to_string(x.content());
  if (text.size() > 200) text = text.substr(0, 200) + "...";
  std::fprintf(stderr, "castor[%s]: dropped an unexpected message from %s: %s\n", self->state.rt->name().c_str(),
               sender_name(self).c_str(), text.c_str());
  std::fflush(stderr);
  // Only a request gets an error back. Answering an asynchronous message with
  // an error made the worker's graceful shutdown hang (test_rpc).
  if (self->current_message_id().is_request()) return caf::sec::unexpected_message;
  return caf::message{};
}

}  // namespace castor::detail
