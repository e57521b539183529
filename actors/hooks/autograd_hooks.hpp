// The hooks through which the worker runtime (actors/) hands distributed
// autograd to the engine/ layer: attaching send/recv functions to the
// tensors of calls made inside a context, and the backward messages.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "actors/observe/inspection.hpp"
#include "messages/autograd_proto.hpp"
#include "messages/value.hpp"

namespace castor::detail {

class AutogradHooks {
 public:
  virtual ~AutogradHooks() = default;

  /// The calling thread's autograd context (invalid if none).
  virtual ContextId current_context() const = 0;
  /// Makes `ctx` the thread's context; returns the previous one.
  virtual ContextId set_current_context(ContextId ctx) = 0;

  /// Sending side (any thread), inside `ctx`: attaches a SendRpcBackward to
  /// the tensors in `values` that require grad and fills `meta`.
  virtual void on_send(ContextId ctx, const std::vector<Value*>& values, WorkerId to, AutogradMeta& meta) = 0;
  /// Receiving side: attaches the paired RecvRpcBackward to the received
  /// tensors that require grad, in the sender's context.
  virtual void on_receive(const AutogradMeta& meta, const std::vector<Value*>& values, WorkerId from) = 0;

  virtual void handle_grad(BackwardGrad&& grad, WorkerId from) = 0;
  virtual void handle_done(BackwardDone&& done) = 0;
  virtual void handle_control(ContextControl&& msg) = 0;
  virtual void on_peer_down(WorkerId rank) = 0;
  /// The worker actor's sweep: pokes the graph tasks whose deadline passed;
  /// returns the next deadline to sweep at, if any.
  virtual std::optional<std::chrono::steady_clock::time_point> sweep(std::chrono::steady_clock::time_point now) = 0;
  /// No backward pass is running and no context message is on its way.
  virtual bool idle() const = 0;
  virtual void stop() = 0;
  virtual std::map<std::string, int64_t> debug_info() const = 0;
  /// The contexts alive here now (castor inspect).
  virtual AutogradInspection inspect() const = 0;
};

/// Makes a context current on this thread for a scope (user functions run
/// in the context of the call that started them).
class ContextScope {
 public:
  ContextScope(AutogradHooks* hooks, ContextId ctx) : hooks_(ctx.valid() ? hooks : nullptr) {
    if (hooks_) previous_ = hooks_->set_current_context(ctx);
  }
  ~ContextScope() {
    if (hooks_) hooks_->set_current_context(previous_);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  AutogradHooks* hooks_;
  ContextId previous_;
};

}  // namespace castor::detail
