// The local optimizer actor: one per worker, shared by every
// DistributedOptimizer with parameters there. Its mailbox serializes their
// steps (one at a time, on the executor), so concurrent steps from several
// trainers on the same parameters never lose an update.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "actors/api/future.hpp"
#include "optimizer/optimizer_spec.hpp"

namespace castor::detail {

class WorkerServices;
class OptimizerHooks;

/// The optimizer layer's per-worker state: the local optimizer actor and
/// its optimizers (made by install_layers, stopped at teardown).
std::unique_ptr<OptimizerHooks> make_local_optimizers(WorkerServices& rt);

/// Registers the functions DistributedOptimizer and Checkpoint call on
/// owners ("castor.optim.*", "castor.ckpt.*"); done once, by install_layers.
void register_optimizer_functions();

/// Creates an optimizer over `params` (tensors owned here) on `rt`'s local
/// optimizer actor; the Future gives its id.
Future<int64_t> create_local_optimizer(WorkerServices& rt, optim::Spec spec, std::vector<at::Tensor> params);

/// Applies the gradients of autograd context `context` (those of this
/// worker's leaves) with optimizer `id`; parameters without one stay as they are.
Future<bool> step_local_optimizer(WorkerServices& rt, int64_t id, int64_t context);

/// Note [Checkpoint]: optimizer `id`'s state, or `tensors` (owned here), to
/// or from the file `path`, as jobs of the optimizer actor (between steps).
Future<int64_t> save_local_optimizer(WorkerServices& rt, int64_t id, std::string path);
Future<bool> load_local_optimizer(WorkerServices& rt, int64_t id, std::string path);
Future<int64_t> save_local_tensors(WorkerServices& rt, std::vector<at::Tensor> tensors, std::string path);
Future<bool> load_local_tensors(WorkerServices& rt, std::vector<at::Tensor> tensors, std::string path);

}  // namespace castor::detail
