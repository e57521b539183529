// Handing a call or a reply that arrived to where it goes: from the worker
// actor (messages through CAF) or from a bulk link's reader thread (B8 of
// Note [Bulk path]: the direct lane, which does not wake the actor).
#pragma once

#include <caf/actor_control_block.hpp>

#include "messages/call.hpp"
#include "messages/protocol_fwd.hpp"

namespace castor::detail {

class Runtime;
class ChunkAssembler;

// Both are safe on any thread: the pending and running tables, the counters,
// the executor and the autograd and RRef hand-offs are thread-safe. `chunks`
// is the worker actor's assembler; off the actor it is null, as a bulk frame
// never refers to CAF chunks (its reader checked that every placeholder was
// filled from the frame).

/// Counts `req` as received and runs it: on the executor, through the RRef
/// context (calls on or with RRefs), or inline (small builtins); its reply
/// goes to `sender`, the calling worker's actor.
void deliver_request(Runtime& rt, CallRequest&& req, const caf::strong_actor_ptr& sender, ChunkAssembler* chunks);

/// Counts `reply` as received and completes its pending call, if any (a late
/// reply after a timeout or a death is dropped quietly).
void deliver_reply(Runtime& rt, CallReply&& reply, ChunkAssembler* chunks);

/// Counts a protocol message from a peer (the autograd ones, Note [Graceful
/// shutdown]) and hands it to the RRef or autograd layer (B10 of Note [Bulk
/// path]). The caller checked that it is well formed and from a live peer.
void deliver_protocol(Runtime& rt, BackwardGrad&& g);
void deliver_protocol(Runtime& rt, BackwardDone&& d);
void deliver_protocol(Runtime& rt, ContextControl&& c);
void deliver_protocol(Runtime& rt, RRefControl&& m);
void deliver_protocol(Runtime& rt, RRefControlAck&& a);

}  // namespace castor::detail
