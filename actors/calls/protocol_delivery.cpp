// Handing a protocol message that arrived to the layer it is for: the same
// steps whether the worker actor took it from CAF or a link's reader from
// the direct lane (B10 of Note [Bulk path]).
#include "actors/calls/delivery.hpp"
#include "actors/runtime/runtime.hpp"
#include "messages/autograd_proto.hpp"
#include "messages/rref_proto.hpp"

namespace castor::detail {

// The autograd messages are counted (Note [Graceful shutdown]); the RRef
// ones are not (their sender is busy until the ack).

void deliver_protocol(Runtime& rt, BackwardGrad&& g) {
  rt.counters.received.fetch_add(1);
  rt.stats.count(MessageType::backward_grad);
  auto from = g.from;
  rt.autograd->handle_grad(std::move(g), from);
}

void deliver_protocol(Runtime& rt, BackwardDone&& d) {
  rt.counters.received.fetch_add(1);
  rt.stats.count(MessageType::backward_done);
  rt.autograd->handle_done(std::move(d));
}

void deliver_protocol(Runtime& rt, ContextControl&& c) {
  rt.counters.received.fetch_add(1);
  rt.stats.count(MessageType::context_control);
  rt.autograd->handle_control(std::move(c));
}

void deliver_protocol(Runtime& rt, RRefControl&& m) {
  rt.stats.count(MessageType::rref_control);
  rt.rrefs->handle_control(std::move(m));
}

void deliver_protocol(Runtime& rt, RRefControlAck&& a) {
  rt.stats.count(MessageType::rref_ack);
  rt.rrefs->handle_ack(std::move(a));
}

}  // namespace castor::detail
