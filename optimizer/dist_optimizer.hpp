// DistributedOptimizer: steps parameters that live on many workers with the
// gradients of one distributed autograd context, like
// torch.distributed.optim.DistributedOptimizer.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "actors/api/worker.hpp"
#include "optimizer/optimizer_spec.hpp"
#include "rref/rref.hpp"

namespace castor {
class Checkpoint;
}

namespace castor::optim {

class DistributedOptimizer {
 public:
  /// One optimizer per owner worker of `params`, on that worker's local
  /// optimizer actor (shared with every other DistributedOptimizer there).
  /// Throws TypeError for an invalid spec, an RpcError naming the owner if
  /// one cannot be reached.
  DistributedOptimizer(Worker& w, Spec spec, const std::vector<RRef<at::Tensor>>& params);

  /// Applies the gradients of autograd context `context_id` on every owner,
  /// in parallel; returns when all are done. Parameters without a gradient
  /// in that context stay as they are.
  void step(int64_t context_id);
  Future<void> step_async(int64_t context_id);

  const Spec& spec() const { return spec_; }

 private:
  friend class castor::Checkpoint;  // saves and loads each owner's optimizer
  Worker* w_;
  Spec spec_;
  std::vector<std::pair<std::string, int64_t>> owners_;  // (owner worker, its optimizer id)
};

}  // namespace castor::optim
