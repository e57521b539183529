// The autograd context actor: one per context id per worker. It keeps the
// context's send and recv functions (alive, by autograd message id), the
// gradients of its backward passes, the workers it talked to, and starts the
// graph task of each pass. See Note [FAST mode] and Note [Context cleanup].
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/api/errors.hpp"
#include "engine/gradient_map.hpp"
#include "engine/send_recv_functions.hpp"
#include "messages/atoms.hpp"
#include "messages/autograd_proto.hpp"

namespace castor::detail {

// Note [Forward inbox]
// ~~~~~~~~~~~~~~~~~~~~
// The forward pass's bookkeeping reaches a context without a message. Each
// call in a context adds a send or recv function (or only a peer) to the
// context's inbox, under the inbox's lock, on the thread that makes or
// receives the call; the context actor takes what the inbox holds at the
// start of each message it handles (take_forward), into its own state.
//  F1 A registration is in the inbox before the message that carries its
//     tensor leaves (or, for a recv, before the call runs), so any message
//     that can refer to it (a gradient for that send, a backward pass, a
//     cleanup) reaches the actor after it: the actor never misses one.
//  F2 The actor is spawned on the first message it must handle (backward,
//     a gradient, an answer, a cleanup, a peer's death), not when the
//     context is made or first seen: a forward pass wakes no actor at all.
//     Before, each call in a context sent its context actor two messages
//     on each side and spawned the peer's actor while the call was served,
//     each a wake of the multiplexer's thread (Note [Where actors run],
//     P2): a 1-hop forward in a fresh context took about twice the call.
struct ForwardInbox {
  std::mutex mtx;
  std::vector<std::shared_ptr<SendRpcBackward>> sends;
  std::vector<std::shared_ptr<RecvRpcBackward>> recvs;
  std::set<WorkerId> peers;  // other workers this context exchanged a message with
};
/// backward() on this worker: the roots and their initial gradients.
struct StartBackward {
  std::vector<at::Tensor> roots;
  bool retain_graph = false;
  std::chrono::milliseconds timeout{0};
  std::function<void(std::optional<ErrorInfo>)> done;
};
struct IncomingGrad {
  BackwardGrad grad;
  WorkerId from = -1;
  std::shared_ptr<SendRpcBackward> send;  // looked up by the context
};
/// A graph task ended (with its error, if it failed).
struct TaskEnded {
  std::optional<ErrorInfo> error;
  bool released_graph = false;
};

}  // namespace castor::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::StartBackward)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::IncomingGrad)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::TaskEnded)

namespace castor::detail {

using context_actor = caf::typed_actor<
    caf::reacts_to<StartBackward>,            // backward() here (the root)
    caf::reacts_to<IncomingGrad>,             // a gradient for one of our send functions
    caf::reacts_to<BackwardDone>,             // the answer to a gradient we sent
    caf::reacts_to<TaskEnded>,
    caf::reacts_to<ContextControl>,           // cleanup or abort, travelling along the peers
    caf::reacts_to<peer_down_atom, WorkerId>>;

class AutogradRuntime;
class WorkerServices;

/// Answers a gradient's sender (BackwardDone, with `error` if it failed);
/// nothing for one that wants no answer (C2 of Note [FAST mode]) or whose
/// sender is gone.
void answer_gradient(WorkerServices& rt, const BackwardGrad& grad, WorkerId from, const std::optional<ErrorInfo>& error);

class GradientStore;

/// `grads` is the context's gradient store (Note [Gradient store]), `inbox`
/// its forward registrations (Note [Forward inbox]).
context_actor spawn_context_actor(AutogradRuntime& ar, ContextId id, std::shared_ptr<GradientStore> grads,
                                  std::shared_ptr<ForwardInbox> inbox);

}  // namespace castor::detail
