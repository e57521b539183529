// GradientMap: a context's gradients, keyed by the leaf tensor's identity.
// Iterating yields pairs whose .first is the user's own leaf tensor and
// .second its gradient; .at(tensor) looks one up.
#pragma once

#include <functional>
#include <map>

#include <ATen/core/Tensor.h>

namespace castor::autograd {

/// Orders tensors by identity (their TensorImpl), not by value.
struct ByIdentity {
  bool operator()(const at::Tensor& a, const at::Tensor& b) const {
    return std::less<const void*>()(a.unsafeGetTensorImpl(), b.unsafeGetTensorImpl());
  }
};

using GradientMap = std::map<at::Tensor, at::Tensor, ByIdentity>;

}  // namespace castor::autograd
