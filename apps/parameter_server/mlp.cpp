#include "mlp.hpp"

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

namespace castor::apps::ps {

Params init_mlp(int64_t hidden, uint64_t seed) {
  // nn::Linear's reset_parameters: kaiming_uniform(a=sqrt(5)) on the weight,
  // which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias.
  auto gen = at::detail::createCPUGenerator(seed);
  auto layer = [&](int64_t in, int64_t out) {
    double bound = 1.0 / std::sqrt(double(in));
    auto w = at::empty({out, in}).uniform_(-bound, bound, gen);
    auto b = at::empty({out}).uniform_(-bound, bound, gen);
    return std::make_pair(w, b);
  };
  auto [w1, b1] = layer(784, hidden);
  auto [w2, b2] = layer(hidden, 10);
  return {w1, b1, w2, b2};
}

at::Tensor mlp_forward(const Params& p, const at::Tensor& images) {
  auto h = at::relu(at::addmm(p[1], images, p[0].t()));
  return at::addmm(p[3], h, p[2].t());
}

at::Tensor mlp_loss(const Params& p, const at::Tensor& images, const at::Tensor& labels) {
  return at::nll_loss(at::log_softmax(mlp_forward(p, images), 1), labels);
}

Evaluation evaluate(const Params& p, const Dataset& data) {
  at::NoGradGuard no_grad;
  auto logits = mlp_forward(p, data.images);
  Evaluation e;
  e.loss = at::nll_loss(at::log_softmax(logits, 1), data.labels).item<double>();
  e.accuracy = logits.argmax(1).eq(data.labels).to(at::kDouble).mean().item<double>();
  return e;
}

Params trainable_copy(const Params& p) {
  Params out;
  for (const auto& t : p) out.push_back(t.detach().clone().requires_grad_(true));
  return out;
}

}  // namespace castor::apps::ps
