// castor::autograd: distributed autograd contexts, backward and gradients,
// like torch.distributed.autograd.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "actors/api/worker.hpp"
#include "engine/gradient_map.hpp"

namespace castor::autograd {

/// A distributed autograd context (RAII), like `with dist_autograd.context()`:
/// calls made on this thread while it lives record send/recv functions, and
/// its backward passes gather gradients here instead of in `.grad`. Ending it
/// releases the context on every worker it reached. One at a time per thread.
class Context {
 public:
  explicit Context(Worker& w);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int64_t id() const { return id_; }

  /// Runs the distributed backward pass from `roots` (any thread). Returns
  /// when it is done on every worker; throws AutogradError (or the cause's
  /// RpcError) naming the worker and the cause if it failed anywhere.
  /// `timeout`: how long any worker may wait for a gradient (default: the
  /// worker's rpc_timeout).
  void backward(const std::vector<at::Tensor>& roots, bool retain_graph = false, Timeout timeout = {});

  /// The gradients of this context (of the leaves on this worker).
  GradientMap gradients() const;

 private:
  Worker* w_;
  int64_t id_;
};

/// The same, by context id, on worker `w` (or on current_worker()).
void backward(Worker& w, int64_t context_id, const std::vector<at::Tensor>& roots, bool retain_graph = false,
              Timeout timeout = {});
void backward(int64_t context_id, const std::vector<at::Tensor>& roots, bool retain_graph = false);
GradientMap get_gradients(Worker& w, int64_t context_id);
GradientMap get_gradients(int64_t context_id);

/// The context active on this thread (0 if none).
int64_t current_context_id();

}  // namespace castor::autograd
