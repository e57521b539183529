// Callee side of a call, for the layers above: the reply path and the
// execution of a plain function, builtin or constructor.
#pragma once

#include <caf/actor_control_block.hpp>

#include "actors/api/registry.hpp"
#include "messages/call.hpp"

namespace castor::detail {

class Runtime;

/// Sends the reply of `req` exactly once, from any thread: forks the RRefs in
/// its result for the caller, chunks large tensors, and ends the request's
/// "in flight" count (see Note [Graceful shutdown]).
Completion make_replier(Runtime* rt, caf::strong_actor_ptr caller, const CallRequest& req);

/// Runs a function or builtin request (small builtins at once, the rest on the
/// executor) and completes `done` with its outcome.
void execute_request(Runtime* rt, CallRequest&& req, Completion done);

}  // namespace castor::detail
