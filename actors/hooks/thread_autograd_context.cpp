// The calling thread's distributed autograd context (one thread_local).
#include "actors/hooks/thread_autograd_context.hpp"

namespace castor::detail {
namespace {
thread_local ContextId tl_context;
}  // namespace

ContextId thread_autograd_context() { return tl_context; }

ContextId exchange_thread_autograd_context(ContextId ctx) {
  auto previous = tl_context;
  tl_context = ctx;
  return previous;
}

}  // namespace castor::detail
