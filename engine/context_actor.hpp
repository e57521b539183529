// The autograd context actor: one per context id per worker. It keeps the
// context's send and recv functions (alive, by autograd message id), the
// gradients of its backward passes, the workers it talked to, and starts the
// graph task of each pass. See Note [FAST mode] and Note [Context cleanup].
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/io/typed_broker.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/api/errors.hpp"
#include "engine/gradient_map.hpp"
#include "engine/send_recv_functions.hpp"
#include "messages/atoms.hpp"
#include "messages/autograd_proto.hpp"

namespace castor::detail {

// Each also tells the context which worker it exchanged a message with (one
// message per call instead of two: the peer_atom alone is for calls whose
// tensors need no gradient).
struct RegisterSend {
  std::shared_ptr<SendRpcBackward> node;
  WorkerId peer = -1;
};
struct RegisterRecv {
  std::shared_ptr<RecvRpcBackward> node;
  WorkerId peer = -1;
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

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::RegisterSend)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::RegisterRecv)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::StartBackward)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::IncomingGrad)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::TaskEnded)

namespace castor::detail {

using context_actor = caf::typed_actor<
    caf::reacts_to<RegisterSend>,             // forward pass: a tensor left in this context
    caf::reacts_to<RegisterRecv>,             // forward pass: a tensor arrived in this context
    caf::reacts_to<peer_atom, WorkerId>,      // this context exchanged a message with a worker
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

/// `grads` is the context's gradient store (Note [Gradient store]).
context_actor spawn_context_actor(AutogradRuntime& ar, ContextId id, std::shared_ptr<GradientStore> grads);

}  // namespace castor::detail
