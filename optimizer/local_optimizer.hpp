// The local optimizer actor: one per worker, shared by every
// DistributedOptimizer with parameters there. Its mailbox serializes their
// steps (one at a time, on the executor), so concurrent steps from several
// trainers on the same parameters never lose an update.
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

#include "actors/api/future.hpp"
#include "optimizer/optimizer_spec.hpp"

namespace castor::detail {

class Runtime;

/// Registers the functions DistributedOptimizer calls on owners
/// ("castor.optim.create", "castor.optim.step"); done once, by install_layers.
void register_optimizer_functions();

/// Creates an optimizer over `params` (tensors owned here) on `rt`'s local
/// optimizer actor; the Future gives its id.
Future<int64_t> create_local_optimizer(Runtime& rt, optim::Spec spec, std::vector<at::Tensor> params);

/// Applies the gradients of autograd context `context` (those of this
/// worker's leaves) with optimizer `id`; parameters without one stay as they are.
Future<bool> step_local_optimizer(Runtime& rt, int64_t id, int64_t context);

}  // namespace castor::detail
