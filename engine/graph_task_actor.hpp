// The graph task actor: one per backward pass per worker. It owns the pass's
// GraphTaskCore and hands it to one executor thread at a time to run ready
// nodes; gradients arriving meanwhile wait in its mailbox. It sends gradients
// to other workers, tracks their answers, and reports the end of its part of
// the pass. See Note [FAST mode].
#pragma once

#include <memory>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/local_actor.hpp>
#include <caf/typed_actor.hpp>

#include "engine/context_actor.hpp"
#include "engine/graph_task.hpp"

namespace castor::detail {

/// An executor thread finished running the core's ready nodes, or (with
/// `goes_on`) has gradients for peers before its next heavy node (D2 of
/// Note [Drain order]): then only `outgoing` is set and the core stays out.
struct DrainDone {
  std::shared_ptr<GraphTaskCore> core;  // handed back
  bool goes_on = false;
  std::vector<OutgoingGrad> outgoing;
  std::vector<std::pair<at::Tensor, at::Tensor>> captured;
  std::optional<std::string> error;
};

/// How the task was started: as the root (backward() here) or by the first
/// gradient that reached this worker.
struct TaskStart {
  ContextId context;
  uint64_t pass = 0;  // C4 of Note [FAST mode]
  bool retain_graph = false;
  std::chrono::milliseconds timeout{0};
  std::shared_ptr<GraphTaskCore> core;
  std::function<void(std::optional<ErrorInfo>)> on_end;  // root: backward()'s caller
  // First contact: the gradient that started us; answered at the end.
  std::optional<IncomingGrad> first;
  std::vector<uint64_t> participants;  // SMART: passed on with our gradients
  std::shared_ptr<GradientStore> grads;  // the context's (Note [Gradient store])
};

}  // namespace castor::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::DrainDone)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::TaskStart)

namespace castor::detail {

using graph_task_actor = caf::typed_actor<
    caf::reacts_to<IncomingGrad>,                                    // a later gradient of this pass
    caf::reacts_to<BackwardDone>,                                    // an answer to our gradient
    caf::reacts_to<DrainDone>,
    caf::reacts_to<ContextControl>,                                  // abort
    caf::reacts_to<peer_down_atom, WorkerId>,
    caf::reacts_to<sweep_atom>>;                                     // watchdog

/// Spawns the task from `parent` (its context actor), on the thread that
/// runs the parent; it reports its end to `context` (TaskEnded).
graph_task_actor spawn_graph_task(caf::local_actor* parent, AutogradRuntime& ar, context_actor context,
                                  TaskStart start);

}  // namespace castor::detail
