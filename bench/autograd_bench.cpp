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
    }
  }
  return out;
}

}  // namespace castor::bench
