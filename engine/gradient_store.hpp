// The gradients of one autograd context on this worker.
#pragma once

#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "engine/gradient_map.hpp"

namespace castor::detail {

// Note [Gradient store]
// ~~~~~~~~~~~~~~~~~~~~~
// get_gradients() is called on a user's or an executor's thread right after
// backward() returns (the distributed optimizer does it on every worker, every
// step). Asking the context actor for them cost two thread hand-offs per call.
// Instead the context's gradients live in a store shared by the context's
// graph tasks, which write, and get_gradients(), which copies them out:
//  K1 A graph task adds what a drain captured before it does anything else
//     with that drain's result -- in particular before it answers a peer or
//     ends the pass -- so when backward() returns on the root, every
//     worker's store holds that pass's gradients.
//  K2 The store is made with the context and dropped with it
//     (AutogradRuntime::forget); a handle held by a running task keeps it
//     alive, unseen, until the task ends.
//  K3 Gradients of several passes in one context add up, keyed by the leaf's
//     TensorImpl, as PyTorch's DistAutogradContext accumulates them.
class GradientStore {
 public:
  void add(std::vector<std::pair<at::Tensor, at::Tensor>>&& captured) {  // (leaf, gradient)
    std::lock_guard<std::mutex> lock(mtx_);
    for (auto& [leaf, g] : captured) {
      auto [it, added] = grads_.try_emplace(leaf.unsafeGetTensorImpl(), leaf, g);
      if (!added) it->second.second = it->second.second + g;  // K3
    }
  }

  autograd::GradientMap snapshot() const {
    std::lock_guard<std::mutex> lock(mtx_);
    autograd::GradientMap out;
    for (const auto& [key, lg] : grads_) out.emplace(lg.first, lg.second);
    return out;
  }

 private:
  mutable std::mutex mtx_;
  std::unordered_map<const void*, std::pair<at::Tensor, at::Tensor>> grads_;
};

}  // namespace castor::detail
