// castor-bench autograd: forward + backward through one hop (PyTorch's
// dist_autograd_1hop_us) and through a chain of 4 workers.
#include <ATen/ATen.h>

#include "bench_suites.hpp"
#include "engine/context.hpp"

CASTOR_FUNCTION(bench_chain, [](std::vector<std::string> route, at::Tensor t) -> at::Tensor {
  if (route.empty()) return t * 2;
  auto next = route.front();
  route.erase(route.begin());
  return castor::current_worker().rpc_sync<at::Tensor>(next, "bench_chain", route, t * 2);
});

namespace castor::bench {
namespace {

double one_hop(Worker& w, int n) {
  auto a = at::rand({3, 3}).set_requires_grad(true);
  auto b = at::rand({3, 3}).set_requires_grad(true);
  return median_us(n, [&] {
    autograd::Context ctx(w);
    auto c = w.rpc_sync<at::Tensor>("worker1", "aten::add", a, b);
    ctx.backward({c.sum()});
    ctx.gradients();
  }, 50);
}

double chain(Worker& w, int n) {
  auto a = at::rand({3, 3}).set_requires_grad(true);
  std::vector<std::string> route{"worker2", "worker3"};
  return median_us(n, [&] {
    autograd::Context ctx(w);
    auto c = w.rpc_sync<at::Tensor>("worker1", "bench_chain", route, a);
    ctx.backward({c.sum()});
    ctx.gradients();
  }, 20);
}

// Lineage bytes per message in each step of a training loop over three hops,
// one context per step: the lineage must not grow from step to step.
std::vector<double> lineage_per_step(Worker& w, int steps) {
  auto weights = at::rand({4, 4}).set_requires_grad(true);
  auto x = at::rand({2, 4});
  std::vector<double> out;
  auto hidden = at::zeros({2, 4});
  for (int s = 0; s < steps; ++s) {
    auto before = w.autograd_debug_info();
    autograd::Context ctx(w);
    auto h = w.rpc_sync<at::Tensor>("worker1", "aten::matmul", x + hidden, weights);
    h = w.rpc_sync<at::Tensor>("worker2", "aten::tanh", h);
    auto out_h = w.rpc_sync<at::Tensor>("worker3", "aten::mul", h, h);
    ctx.backward({out_h.sum()});
    hidden = out_h.detach();  // the next step's context starts a new graph
    auto after = w.autograd_debug_info();
    auto sends = after.at("send_functions_total") - before.at("send_functions_total");
    auto bytes = after.at("lineage_bytes_total") - before.at("lineage_bytes_total");
    out.push_back(sends ? double(bytes) / double(sends) : 0);
  }
  return out;
}

}  // namespace

std::vector<Figure> bench_autograd(const Options& opts) {
  std::vector<Figure> out;
  for (auto mode : {AutogradMode::fast, AutogradMode::smart}) {
    auto suffix = std::string(mode == AutogradMode::fast ? "" : "_smart");
    {
      BenchWorld world(opts, 2, [mode](WorkerOptions& o) { o.autograd_mode = mode; }, mode);
      out.push_back({"dist_autograd_1hop" + suffix + "_us", one_hop(world.self(), 1000 * opts.reps)});
    }
    {
      BenchWorld world(opts, 4, [mode](WorkerOptions& o) { o.autograd_mode = mode; }, mode);
      out.push_back({"dist_autograd_chain4" + suffix + "_us", chain(world.self(), 300 * opts.reps)});
      if (mode == AutogradMode::smart) {
        auto per_step = lineage_per_step(world.self(), 20);
        out.push_back({"lineage_bytes_per_message_step1", per_step.front()});
        out.push_back({"lineage_bytes_per_message_step20", per_step.back()});
      }
    }
  }
  return out;
}

}  // namespace castor::bench
