// The distributed autograd context of the calling thread: what a call made
// on this thread joins (castor::autograd::Context, ContextScope). It lives
// beside the arrival runner, which clears it around the actors it runs (D7
// of Note [Actors run where their messages arrive]).
#pragma once

#include "messages/ids.hpp"

namespace castor::detail {

/// The calling thread's autograd context (invalid if none).
ContextId thread_autograd_context();

/// Makes `ctx` the calling thread's autograd context; returns the previous one.
ContextId exchange_thread_autograd_context(ContextId ctx);

}  // namespace castor::detail
