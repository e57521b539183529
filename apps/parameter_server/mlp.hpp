// The parameter-server model, MLP 784-H-10, as four plain tensors (W1, b1,
// W2, b2): trainers and server exchange exactly these, and the single-process
// reference trains the very same function.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "apps/common/fashion_mnist.hpp"

namespace castor::apps::ps {

using Params = std::vector<at::Tensor>;

/// libtorch's default initialisation of Linear(784, H) and Linear(H, 10),
/// drawn from a generator seeded with `seed` (same seed, same model).
Params init_mlp(int64_t hidden, uint64_t seed);

/// Logits [N, 10] for images [N, 784].
at::Tensor mlp_forward(const Params& p, const at::Tensor& images);

/// Mean cross-entropy of the logits against the labels.
at::Tensor mlp_loss(const Params& p, const at::Tensor& images, const at::Tensor& labels);

struct Evaluation {
  double loss = 0;
  double accuracy = 0;
};
Evaluation evaluate(const Params& p, const Dataset& data);

/// Fresh copies of `p` that require grad (a trainer's local replica).
Params trainable_copy(const Params& p);

}  // namespace castor::apps::ps
