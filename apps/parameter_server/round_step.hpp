// S5 of Note [Shared parameters]: a sync round's mean and SGD's step in one
// pass over memory.
#pragma once

#include <vector>

#include "apps/parameter_server/mlp.hpp"

namespace castor::apps::ps {

/// What SGD keeps of a tensor between steps: with momentum m its buffer,
/// undefined before the first step (torch::optim::SGD's own rule).
struct MomentumBuffer {
  at::Tensor buffer;   // undefined: plain SGD
  bool first = false;  // the step fills it with the mean
};

/// For every i: params[i] -= lr * d, where d is the mean of the pushes'
/// i-th tensors, or with momentum m (buffers[i].buffer defined) the buffer
/// after buffer = m * buffer + mean (the mean itself on the first step):
/// torch::optim::SGD without dampening, Nesterov or weight decay, on the
/// pushes' mean. Float tensors, contiguous, in params' shapes; the pushes
/// are read, never written. `buffers` is empty for plain SGD.
void step_on_round_mean(const Params& params, const std::vector<const Params*>& pushes, double lr, double momentum,
                        const std::vector<MomentumBuffer>& buffers);

/// Whether step_on_round_mean can take these tensors (float, contiguous,
/// on the CPU, in params' shapes); otherwise the caller goes through ATen.
bool fits_round_step(const Params& params, const std::vector<const Params*>& pushes,
                     const std::vector<MomentumBuffer>& buffers);

}  // namespace castor::apps::ps
