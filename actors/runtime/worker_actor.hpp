// The worker actor: one per worker, the RPC agent. It routes calls out and in,
// hands user functions to the executor, tracks peers, timeouts and graceful
// shutdown. It never runs user code and never blocks.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/replies_to.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/io/typed_broker.hpp>

#include "actors/hooks/protocol_actor.hpp"

#include "actors/api/registry.hpp"
#include "messages/atoms.hpp"
#include "messages/call.hpp"
#include "messages/chunk.hpp"
#include "messages/rendezvous.hpp"
#include "messages/rref_proto.hpp"
#include "messages/shutdown_proto.hpp"

namespace castor::detail {

class Runtime;

/// Ends this worker: graceful (distributed termination detection) or at once.
/// `done` gets nothing on success, else why shutting down failed.
struct ShutdownCommand {
  bool graceful = true;
  std::function<void(std::optional<ErrorInfo>)> done;
};

}  // namespace castor::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::ShutdownCommand)

namespace castor::detail {

/// What peers may send to a worker (published; checked by remote_actor).
using worker_peer = caf::typed_actor<
    caf::reacts_to<hello_atom, WorkerId>,                              // a peer introduces itself
    caf::reacts_to<CallRequest>,                                       // run a function here
    caf::reacts_to<CallReply>,                                         // result of our call
    caf::reacts_to<TensorChunk>,                                       // part of a large tensor
    caf::reacts_to<RRefControl>,                                       // RRef protocol message
    caf::reacts_to<RRefControlAck>,                                    // ... and its ack
    caf::reacts_to<BackwardGrad>,                                      // gradients for our send function
    caf::reacts_to<BackwardDone>,                                      // ... the answer to ours
    caf::reacts_to<ContextControl>,                                    // autograd context cleanup / abort
    caf::replies_to<join_atom, JoinRequest>::with<JoinReply>,          // rendezvous (rank 0)
    caf::replies_to<info_atom>::with<std::vector<WorkerRecord>>,       // who joined (rank 0)
    caf::replies_to<joined_atom, WorkerId>::with<bool>,                // init barrier (rank 0)
    caf::reacts_to<shutdown_atom, WorkerId>,                           // a worker entered shutdown (rank 0)
    caf::replies_to<probe_atom, int64_t>::with<TerminationReport>,     // termination wave
    caf::replies_to<deadline_atom, std::string>::with<bool>,           // shutdown past its bound (rank 0 says)
    caf::replies_to<done_atom>::with<bool>>;                           // everyone is done

/// The full interface: peers' messages plus the local API's.
using worker_actor = worker_peer::extend<
    caf::replies_to<peer_atom, WorkerId, worker_peer>::with<bool>,  // init: a connected peer
    caf::replies_to<ready_atom>::with<std::vector<worker_peer>>,    // init: every peer, once known
    caf::reacts_to<running_atom>,                                   // init: done; run the held calls
    caf::reacts_to<sweep_atom>,                                     // call deadlines are due
    caf::reacts_to<probe_atom>,                                     // start a termination wave (rank 0)
    caf::reacts_to<deadline_atom>,                                  // the shutdown bound is due (rank 0)
    caf::reacts_to<stop_atom, WorkerId>,                            // a peer lost during shutdown: fail now?
    caf::reacts_to<ShutdownCommand>>;

/// The worker actor runs where Note [Where actors run] says (as a broker on
/// the middleman's multiplexer thread); it does little per message (user
/// code runs on the executor), so it does not hold up I/O.
using worker_broker = protocol_broker<worker_actor>;

/// Spawns the worker actor of `rt` (name store delegate on rank 0).
worker_actor spawn_worker_actor(Runtime& rt);

}  // namespace castor::detail
