// The reference for castor's optimizers: libtorch's own, built from an
// optim::Spec independently of castor's optimizer/ code, so that a test that
// compares the two compares two implementations.
#pragma once

#include <memory>
#include <variant>
#include <vector>

#include <torch/torch.h>

#include "optimizer/optimizer_spec.hpp"

namespace castor::test {

inline std::unique_ptr<torch::optim::Optimizer> libtorch_optimizer(const optim::Spec& spec,
                                                                   std::vector<torch::Tensor> ps) {
  namespace to = torch::optim;
  if (auto* s = std::get_if<optim::SGD>(&spec))
    return std::make_unique<to::SGD>(ps, to::SGDOptions(s->lr).momentum(s->momentum).dampening(s->dampening)
                                             .weight_decay(s->weight_decay).nesterov(s->nesterov));
  if (auto* s = std::get_if<optim::Adam>(&spec))
    return std::make_unique<to::Adam>(ps, to::AdamOptions(s->lr).betas({s->beta1, s->beta2}).eps(s->eps)
                                              .weight_decay(s->weight_decay).amsgrad(s->amsgrad));
  if (auto* s = std::get_if<optim::AdamW>(&spec))
    return std::make_unique<to::AdamW>(ps, to::AdamWOptions(s->lr).betas({s->beta1, s->beta2}).eps(s->eps)
                                               .weight_decay(s->weight_decay).amsgrad(s->amsgrad));
  if (auto* s = std::get_if<optim::Adagrad>(&spec))
    return std::make_unique<to::Adagrad>(ps, to::AdagradOptions(s->lr).lr_decay(s->lr_decay)
                                                 .weight_decay(s->weight_decay)
                                                 .initial_accumulator_value(s->initial_accumulator_value).eps(s->eps));
  auto* s = std::get_if<optim::RMSprop>(&spec);
  return std::make_unique<to::RMSprop>(ps, to::RMSpropOptions(s->lr).alpha(s->alpha).eps(s->eps)
                                               .weight_decay(s->weight_decay).momentum(s->momentum)
                                               .centered(s->centered));
}

}  // namespace castor::test
