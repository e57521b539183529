// DistributedOptimizer and RemoteModule: equal to single-process libtorch
// training for every optimizer spec, serialized concurrent steps, errors.
#include <doctest/doctest.h>

#include <thread>

#include <torch/torch.h>

#include "engine/context.hpp"
#include "optimizer/dist_optimizer.hpp"
#include "optimizer/remote_module.hpp"
#include "support/cluster.hpp"
#include "support/libtorch_optimizers.hpp"
#include "support/test_functions.hpp"

using namespace castor;
using castor::test::bounded;
using castor::test::LocalWorld;
using std::chrono::milliseconds;

namespace {

// A 2-worker model-parallel MLP: layer 1 on worker1 (RemoteModule), layer 2
// here; K steps with distributed autograd and a DistributedOptimizer, then the
// same K steps in one process with libtorch's optimizer: equal parameters.
void check_equivalence(LocalWorld& world, const optim::Spec& spec, int steps) {
  torch::manual_seed(7);
  auto& w = world[0];
  nn::RemoteModule<torch::nn::Linear> layer1(w, "worker1", 4, 8);
  torch::nn::Linear layer2(8, 3);
  auto remote_params = layer1.parameter_rrefs();
  std::vector<RRef<torch::Tensor>> params = remote_params;
  for (auto& p : layer2->parameters()) params.push_back(w.make_rref(p));
  optim::DistributedOptimizer opt(w, spec, params);

  // The reference: the same initial values, one process.
  torch::nn::Linear ref1(4, 8), ref2(8, 3);
  {
    torch::NoGradGuard no_grad;
    ref1->weight.copy_(remote_params[0].to_here());
    ref1->bias.copy_(remote_params[1].to_here());
    ref2->weight.copy_(layer2->weight);
    ref2->bias.copy_(layer2->bias);
  }
  std::vector<torch::Tensor> ref_params = ref1->parameters();
  for (auto& p : ref2->parameters()) ref_params.push_back(p);
  auto ref_opt = castor::test::libtorch_optimizer(spec, ref_params);

  for (int k = 0; k < steps; ++k) {
    auto x = torch::randn({5, 4});
    auto target = torch::randn({5, 3});
    {
      autograd::Context ctx(w);
      auto h = layer1.forward(x).relu();
      auto loss = torch::mse_loss(layer2(h), target);
      ctx.backward({loss});
      opt.step(ctx.id());
    }
    ref_opt->zero_grad();
    torch::mse_loss(ref2(ref1(x).relu()), target).backward();
    ref_opt->step();
  }
  CHECK(torch::allclose(remote_params[0].to_here(), ref1->weight, 1e-5, 1e-5));
  CHECK(torch::allclose(remote_params[1].to_here(), ref1->bias, 1e-5, 1e-5));
  CHECK(torch::allclose(layer2->weight, ref2->weight, 1e-5, 1e-5));
  CHECK(torch::allclose(layer2->bias, ref2->bias, 1e-5, 1e-5));
  CHECK_FALSE(layer2->weight.grad().defined());  // the context's gradients were used, not .grad
}

}  // namespace

TEST_CASE("model-parallel MLP with DistributedOptimizer(SGD) equals single-process libtorch SGD") {
  LocalWorld world(2);
  check_equivalence(world, optim::SGD{0.05}, 6);
}

TEST_CASE("... and so does Adam") {
  LocalWorld world(2);
  check_equivalence(world, optim::Adam{0.01}, 6);
}

TEST_CASE("every optimizer spec follows libtorch's semantics") {
  LocalWorld world(2);
  const optim::Spec specs[] = {
      optim::SGD{0.05, 0.9, 0.1, 0.01, false},
      optim::SGD{0.05, 0.9, 0.0, 0.0, true},
      optim::Adam{0.01, 0.8, 0.99, 1e-6, 0.01, true},
      optim::AdamW{0.01},
      optim::Adagrad{0.1, 0.01, 0.001, 0.1},
      optim::RMSprop{0.01, 0.9, 1e-8, 0.001, 0.5, true},
  };
  for (const auto& spec : specs) {
    CAPTURE(optim::name_of(spec));
    check_equivalence(world, spec, 4);
  }
}

TEST_CASE("parameters without a gradient in the context stay unchanged, also on an uninvolved owner") {
  LocalWorld world(3);
  auto& w = world[0];
  nn::RemoteModule<torch::nn::Linear> used(w, "worker1", 2, 2);
  nn::RemoteModule<torch::nn::Linear> idle(w, "worker2", 2, 2);  // never part of the context
  auto params = used.parameter_rrefs();
  auto idle_params = idle.parameter_rrefs();
  params.insert(params.end(), idle_params.begin(), idle_params.end());
  auto before = idle_params[0].to_here();
  auto used_before = params[0].to_here();
  optim::DistributedOptimizer opt(w, optim::SGD{0.1}, params);
  autograd::Context ctx(w);
  auto loss = used.forward(torch::ones({1, 2})).sum();
  ctx.backward({loss});
  opt.step(ctx.id());
  CHECK(torch::equal(idle_params[0].to_here(), before));
  CHECK_FALSE(torch::equal(params[0].to_here(), used_before));
}

TEST_CASE("RemoteModule: forward and forward_async run on the owner, backward reaches its parameters") {
  LocalWorld world(2);
  auto& w = world[0];
  nn::RemoteModule<torch::nn::Linear> layer(w, "worker1", 3, 2);
  auto params = layer.parameter_rrefs();
  REQUIRE(params.size() == 2);
  CHECK(params[0].owner_name() == "worker1");
  auto x = torch::randn({4, 3});
  auto expected = torch::addmm(params[1].to_here(), x, params[0].to_here().t());
  CHECK(torch::allclose(layer.forward(x), expected));
  CHECK(torch::allclose(layer.forward_async(x).wait(milliseconds(10000)), expected));
  autograd::Context ctx(w);
  auto out = layer.forward_async(x).wait(milliseconds(10000));
  CHECK(out.requires_grad());  // recorded: a recv function stands for the remote layer
  ctx.backward({out.sum()});
  CHECK(w.rpc_sync<int64_t>("worker1", "param_grad_count", ctx.id()) == 2);  // weight and bias, on their owner
}

TEST_CASE("concurrent steps from several trainers' optimizers on the same parameters lose no update") {
  LocalWorld world(4);
  // The parameters live on worker0; three trainers, each its own optimizer.
  auto p0 = world[1].rpc_sync<std::vector<RRef<torch::Tensor>>>("worker0", "shared_linear_params");
  auto w0 = p0[0].to_here(), b0 = p0[1].to_here();
  const int trainers = 3, steps = 8;
  const double lr = 0.01;
  std::vector<std::thread> threads;
  for (int t = 1; t <= trainers; ++t)
    threads.emplace_back([&, t] {
      auto& w = world[size_t(t)];
      auto params = w.rpc_sync<std::vector<RRef<torch::Tensor>>>("worker0", "shared_linear_params");
      optim::DistributedOptimizer opt(w, optim::SGD{lr}, params);
      for (int s = 0; s < steps; ++s) {
        autograd::Context ctx(w);
        // out.sum() over 2 rows of ones: dW = [2, 2, 2], db = 2, whatever W is.
        auto out = w.rpc_sync<torch::Tensor>("worker0", "aten::linear", torch::ones({2, 3}), params[0], params[1]);
        ctx.backward({out.sum()});
        opt.step(ctx.id());
      }
    });
  for (auto& th : threads) th.join();
  auto n = double(trainers * steps);
  CHECK(torch::allclose(p0[0].to_here(), w0 - lr * n * 2, 1e-4, 1e-4));
  CHECK(torch::allclose(p0[1].to_here(), b0 - lr * n * 2, 1e-4, 1e-4));
}

TEST_CASE("an invalid spec or an unreachable owner gives a clear error") {
  LocalWorld world(2);
  auto p = world[0].remote<torch::Tensor>("worker1", "identity", torch::ones({2}).requires_grad_(true));
  CHECK_THROWS_WITH_AS(optim::DistributedOptimizer(world[0], optim::SGD{-1.0}, {p}),
                       doctest::Contains("learning rate must be >= 0"), TypeError);
  CHECK_THROWS_WITH_AS(optim::DistributedOptimizer(world[0], optim::SGD{0.1, 0, 0.5, 0, true}, {p}),
                       doctest::Contains("Nesterov momentum requires a momentum and zero dampening"), TypeError);
  CHECK_THROWS_WITH_AS(optim::DistributedOptimizer(world[0], optim::Adam{0.1, 1.5}, {p}),
                       doctest::Contains("beta1 must be in [0, 1)"), TypeError);
}

TEST_CASE("a DistributedOptimizer whose owner died fails its step naming the owner") {
  auto port = test::free_port();
  test::ChildWorker child(1, 2, port);
  auto w0 = init_rpc(test::local_options(0, 2, port));
  try {
    nn::RemoteModule<torch::nn::Linear> layer(w0, "worker1", 2, 2);
    optim::DistributedOptimizer opt(w0, optim::SGD{0.1}, layer.parameter_rrefs());
    autograd::Context ctx(w0);
    child.kill();
    std::string msg;
    bounded(milliseconds(10000), "step on a dead owner", [&] {
      try {
        opt.step(ctx.id());
      } catch (const RpcError& e) {
        msg = e.what();
      }
    });
    CHECK(msg.find("worker worker1 is unreachable") != std::string::npos);
  } catch (const std::exception& e) {
    FAIL_CHECK("unexpected: " << std::string(e.what()));
  }
  w0.shutdown(false);
}
