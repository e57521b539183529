// The public autograd API: contexts, backward, gradients.
#include "engine/context.hpp"

#include <caf/send.hpp>

#include "actors/hooks/thread_autograd_context.hpp"
#include "actors/hooks/worker_services.hpp"
#include "engine/autograd_runtime.hpp"
#include "engine/gradient_store.hpp"

namespace castor::autograd {
namespace {

using detail::AutogradRuntime;

AutogradRuntime& runtime_of(Worker& w) {
  auto& rt = detail::services(w);
  if (!rt.autograd() || !rt.running())
    throw ShutdownError(ErrorInfo{ErrorKind::Shutdown, rt.name(), "worker " + rt.name() + " is shut down"});
  return detail::autograd_runtime(rt);
}

detail::context_actor context_actor_of(Worker& w, int64_t id) {
  auto actor = runtime_of(w).context(ContextId(uint64_t(id)), false);
  if (!actor)
    throw AutogradError(ErrorInfo{ErrorKind::Lookup, w.name(),
                                  "worker " + w.name() + " has no autograd context " + std::to_string(id)});
  return actor;
}

}  // namespace

Context::Context(Worker& w) : w_(&w), id_(0) {
  auto& ar = runtime_of(w);
  if (auto active = ar.current_context(); active.valid())
    throw AutogradError(ErrorInfo{ErrorKind::Autograd, w.name(),
                                  "nested autograd contexts on one thread are not supported: context " +
                                      std::to_string(active.as_int()) + " is active on this thread"});
  auto id = ar.create_context();
  ar.set_current_context(id);
  id_ = id.as_int();
}

Context::~Context() {
  auto& rt = detail::services(*w_);
  if (!rt.autograd()) return;
  auto& ar = detail::autograd_runtime(rt);
  ContextId id{uint64_t(id_)};
  if (ar.current_context() == id) ar.set_current_context(ContextId{});
  // This thread runs the cleanup (Note [Actors run where their messages
  // arrive]).
  if (auto actor = ar.context(id, false))
    ar.deliver(actor, ContextControl{id, ContextControl::cleanup, rt.rank(), {}});
}

void Context::backward(const std::vector<at::Tensor>& roots, bool retain_graph, Timeout timeout) {
  autograd::backward(*w_, id_, roots, retain_graph, timeout);
}

GradientMap Context::gradients() const { return get_gradients(*w_, id_); }

void backward(Worker& w, int64_t context_id, const std::vector<at::Tensor>& roots, bool retain_graph,
              Timeout timeout) {
  auto actor = context_actor_of(w, context_id);
  auto& ar = runtime_of(w);
  Promise<void> done(detail::CallbackRunner{});
  detail::StartBackward sb;
  sb.roots = roots;
  sb.retain_graph = retain_graph;
  sb.timeout = timeout.value.count() > 0 ? timeout.value : detail::services(w).options().rpc_timeout;
  sb.done = [done](std::optional<ErrorInfo> e) {
    if (e)
      done.try_set_error(std::move(*e));
    else
      done.try_set_value();
  };
  // BW1 of Note [Backward at shutdown]: a worker that stops ends this wait.
  struct Watch {
    std::shared_ptr<detail::BackwardWaiters> waiters;
    uint64_t id;
    ~Watch() { waiters->remove(id); }
  } watch{ar.backward_waiters(), 0};
  watch.id = watch.waiters->add(ContextId(uint64_t(context_id)),
                                [done](ErrorInfo e) { done.try_set_error(std::move(e)); });
  // This thread starts the pass, and runs what it can of our part before it
  // waits (Note [Actors run where their messages arrive]).
  ar.deliver(actor, std::move(sb));
  done.future().wait();
}

void backward(int64_t context_id, const std::vector<at::Tensor>& roots, bool retain_graph) {
  backward(current_worker(), context_id, roots, retain_graph);
}

GradientMap get_gradients(Worker& w, int64_t context_id) {
  // A copy out of the context's store, no message (Note [Gradient store]).
  auto store = runtime_of(w).gradients_of(ContextId(uint64_t(context_id)));
  if (!store)
    throw AutogradError(ErrorInfo{ErrorKind::Lookup, w.name(),
                                  "worker " + w.name() + " has no autograd context " + std::to_string(context_id)});
  return store->snapshot();
}

GradientMap get_gradients(int64_t context_id) { return get_gradients(current_worker(), context_id); }

int64_t current_context_id() {
  // One per thread, whichever worker's runtime set it.
  return detail::thread_autograd_context().as_int();
}

}  // namespace castor::autograd
