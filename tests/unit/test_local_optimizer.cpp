// The local optimizer (optimizer/local_optimizer.hpp) on one worker: the
// optimizer an owner builds from a spec steps exactly as libtorch's own does
// with the same options, from the gradients of an autograd context rather
// than .grad; what it refuses comes back as the Future's error.
#include <doctest/doctest.h>

#include <torch/torch.h>

#include "actors/api/worker_access.hpp"
#include "engine/context.hpp"
#include "optimizer/local_optimizer.hpp"
#include "support/cluster.hpp"
#include "support/libtorch_optimizers.hpp"

using namespace castor;
using std::chrono::milliseconds;

namespace {

// One worker, alone in its world, in this process.
Worker one_worker() {
  auto o = test::local_options(0, 1, test::free_port());
  return init_rpc(o);
}

torch::Tensor leaf(torch::Tensor t) { return t.detach().clone().set_requires_grad(true); }

// The loss of a small linear model; both parameters get a gradient.
torch::Tensor loss_of(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  return (x.matmul(w) + b).tanh().pow(2).sum();
}

// Gradients of `loss` in a fresh context of `w`, then one step of optimizer `id`.
void context_step(Worker& w, int64_t id, const std::function<torch::Tensor()>& loss) {
  autograd::Context ctx(w);
  ctx.backward({loss()});
  CHECK(castor::detail::step_local_optimizer(castor::detail::services(w), id, ctx.id()).wait(milliseconds(20000)));
}

}  // namespace

TEST_CASE("a local optimizer steps like libtorch's with the same options, for every spec, over several steps") {
  auto w = one_worker();
  const optim::Spec specs[] = {
      optim::SGD{0.05},
      optim::SGD{0.05, 0.9, 0.1, 0.01, false},
      optim::SGD{0.05, 0.9, 0.0, 0.0, true},
      optim::Adam{0.01, 0.8, 0.99, 1e-6, 0.01, true},
      optim::AdamW{0.01},
      optim::Adagrad{0.1, 0.01, 0.001, 0.1},
      optim::RMSprop{0.01, 0.9, 1e-8, 0.001, 0.5, true},
  };
  for (const auto& spec : specs) {
    CAPTURE(optim::name_of(spec));
    torch::manual_seed(3);
    auto wt = leaf(torch::randn({3, 2})), bias = leaf(torch::randn({2}));
    auto ref_w = leaf(wt), ref_b = leaf(bias), start = wt.detach().clone();
    auto id = castor::detail::create_local_optimizer(castor::detail::services(w), spec, {wt, bias}).wait(milliseconds(20000));
    auto ref = castor::test::libtorch_optimizer(spec, {ref_w, ref_b});
    for (int k = 0; k < 4; ++k) {  // several steps: momentum and running averages matter
      auto x = torch::randn({5, 3});
      context_step(w, id, [&] { return loss_of(x, wt, bias); });
      ref->zero_grad();
      loss_of(x, ref_w, ref_b).backward();
      ref->step();
      CAPTURE(k);
      CHECK(torch::allclose(wt, ref_w, 1e-6, 1e-6));
      CHECK(torch::allclose(bias, ref_b, 1e-6, 1e-6));
    }
    CHECK_FALSE(torch::allclose(wt, start));  // it did move
  }
  w.shutdown();
}

// The context's gradients stand in for .grad during the step; .grad is put
// back afterwards, and a stale .grad never leaks into the step.
TEST_CASE("a step uses the context's gradients, .grad is neither used nor changed") {
  auto w = one_worker();
  auto p = leaf(torch::tensor({1.0, -2.0, 3.0}));
  auto stale = torch::full({3}, 1000.0);
  p.mutable_grad() = stale.clone();
  auto id = castor::detail::create_local_optimizer(castor::detail::services(w), optim::SGD{0.1}, {p}).wait(milliseconds(20000));
  context_step(w, id, [&] { return (p * p).sum(); });  // gradient 2p
  CHECK(torch::allclose(p, torch::tensor({0.8, -1.6, 2.4})));  // p - 0.1 * 2p
  REQUIRE(p.grad().defined());
  CHECK(torch::equal(p.grad(), stale));
  w.shutdown();
}

// libtorch skips a parameter whose .grad is undefined; a parameter with no
// gradient in the context must get an undefined one, not zeros (with weight
// decay, zeros would still move it).
TEST_CASE("a parameter without a gradient in the context stays as it is, weight decay included") {
  auto w = one_worker();
  auto used = leaf(torch::ones({2})), unused = leaf(torch::full({2}, 5.0));
  auto id = castor::detail::create_local_optimizer(castor::detail::services(w), optim::SGD{0.1, 0.0, 0.0, 0.5}, {used, unused})
                .wait(milliseconds(20000));
  context_step(w, id, [&] { return used.sum(); });
  CHECK(torch::allclose(used, torch::full({2}, 1.0 - 0.1 * (1.0 + 0.5))));
  CHECK(torch::equal(unused, torch::full({2}, 5.0)));
  CHECK_FALSE(unused.grad().defined());
  // A context this worker never took part in has no gradients here at all.
  CHECK(castor::detail::step_local_optimizer(castor::detail::services(w), id, 0x7fff0000ffffLL).wait(milliseconds(20000)));
  CHECK(torch::allclose(used, torch::full({2}, 0.85)));
  CHECK(torch::equal(unused, torch::full({2}, 5.0)));
  w.shutdown();
}

TEST_CASE("optimizers get their own ids, an unknown id is an error naming the worker and the id") {
  auto w = one_worker();
  auto p = leaf(torch::ones({1}));
  auto a = castor::detail::create_local_optimizer(castor::detail::services(w), optim::SGD{0.1}, {p}).wait(milliseconds(20000));
  auto b = castor::detail::create_local_optimizer(castor::detail::services(w), optim::Adam{}, {p}).wait(milliseconds(20000));
  CHECK(a != b);
  auto f = castor::detail::step_local_optimizer(castor::detail::services(w), a + b + 100, 1);
  auto expected = "worker worker0 has no optimizer " + std::to_string(a + b + 100);
  CHECK_THROWS_WITH_AS(f.wait(milliseconds(20000)), doctest::Contains(expected.c_str()), LookupError);
  w.shutdown();
}

// Validation belongs to DistributedOptimizer; what libtorch itself refuses
// while building the optimizer comes back through the Future, not as a crash.
TEST_CASE("an optimizer libtorch refuses to build fails the creating Future with libtorch's reason") {
  auto w = one_worker();
  auto p = leaf(torch::ones({1}));
  auto f = castor::detail::create_local_optimizer(castor::detail::services(w), optim::SGD{0.1, 0.0, 0.0, 0.0, true}, {p});
  CHECK_THROWS_WITH_AS(f.wait(milliseconds(20000)), doctest::Contains("Nesterov momentum requires a momentum"), RpcError);
  w.shutdown();
}
