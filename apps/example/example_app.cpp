// `castor run example`: the README's "write your own app", kept here so that
// the test suite builds and runs it. A linear layer lives on worker1 and
// learns to sum its inputs, trained from worker0.
#include <cstdio>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

#include "apps/common/app.hpp"
#include "engine/context.hpp"
#include "optimizer/dist_optimizer.hpp"
#include "optimizer/remote_module.hpp"

// Any libtorch module can live on another worker; register it with the
// types of its constructor arguments.
CASTOR_REMOTE_MODULE(torch::nn::Linear, int64_t, int64_t);

namespace {

int run(castor::Worker& w, const castor::apps::AppArgs& args) {
  if (w.rank() != 0) return 0;  // serve until rank 0 is done
  castor::nn::RemoteModule<torch::nn::Linear> layer(w, "worker1", 10, 1);  // built on worker1
  castor::optim::DistributedOptimizer opt(w, castor::optim::Adam{0.05}, layer.parameter_rrefs());
  int64_t steps = args.get_int("steps", 200);
  for (int64_t step = 1; step <= steps; ++step) {
    auto x = at::randn({32, 10});
    castor::autograd::Context ctx(w);  // one context per step
    auto loss = (layer.forward(x) - x.sum(1, true)).pow(2).mean();
    ctx.backward({loss});              // reaches worker1 by itself
    opt.step(ctx.id());                // updates the weights on worker1
    if (step == 1 || step == steps) std::printf("step %lld: loss %.4f\n", (long long)step, loss.item<double>());
  }
  return 0;
}

castor::apps::AppRegistrar registrar{castor::apps::App{
    "example", "the README's own app: a remote linear layer learns to sum its inputs",
    "  --steps N         training steps (default 200)\n", 2 /* default workers */, {"steps"}, run}};

}  // namespace
