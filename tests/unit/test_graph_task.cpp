// GraphTaskCore's light nodes (Note [Light nodes]): which nodes the graph task
// actor may run on its own thread, and that a light-only run stops before the
// first node that is not.
#include <doctest/doctest.h>

#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include "engine/graph_task.hpp"

using castor::detail::GraphTaskCore;
using castor::detail::OutgoingGrad;

namespace {

struct UserFunction : torch::autograd::Function<UserFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext*, at::Tensor x) { return x * 1; }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*, torch::autograd::variable_list g) {
    return g;
  }
};

// A core for backward from `loss`, its root gradient fed (the root worker's start).
std::unique_ptr<GraphTaskCore> core_for(const at::Tensor& loss) {
  auto core = std::make_unique<GraphTaskCore>(/*retain_graph=*/true);
  std::vector<torch::autograd::Edge> roots{torch::autograd::impl::gradient_edge(loss)};
  core->compute_dependencies(roots, {});
  core->add_root_grads(roots, {at::ones_like(loss)});
  return core;
}

}  // namespace

TEST_CASE("built-in nodes on small tensors are light and run to the end") {
  auto a = torch::rand({3, 3}, torch::requires_grad());
  auto core = core_for((a * 2).sum());
  CHECK(core->next_is_light());  // SumBackward0 on one element
  std::vector<OutgoingGrad> out;
  core->run(out, /*light_only=*/true);
  CHECK_FALSE(core->has_ready());
  CHECK(core->finished());  // MulBackward0 and the leaf's AccumulateGrad too
  auto captured = core->take_captured();
  REQUIRE(captured.size() == 1);
  CHECK(torch::allclose(captured[0].second, torch::full({3, 3}, 2.0)));
}

TEST_CASE("a light-only run stops before a built-in node on a large gradient") {
  auto a = torch::rand({100, 100}, torch::requires_grad());
  auto core = core_for((a * 2).sum());
  std::vector<OutgoingGrad> out;
  core->run(out, /*light_only=*/true);  // SumBackward0: one element in
  REQUIRE(core->has_ready());
  CHECK_FALSE(core->next_is_light());  // MulBackward0: 10,000 elements in
  core->run(out);
  CHECK(core->finished());
}

TEST_CASE("user code is never light: custom functions, node hooks, hooks on leaves") {
  auto a = torch::rand({3}, torch::requires_grad());
  {
    auto core = core_for(UserFunction::apply(a).sum());
    std::vector<OutgoingGrad> out;
    core->run(out, true);  // SumBackward0
    CHECK_FALSE(core->next_is_light());  // the custom function's node
  }
  {
    auto hidden = a * 2;
    hidden.register_hook([](at::Tensor g) { return g; });  // a pre-hook on MulBackward0
    auto core = core_for(hidden.sum());
    std::vector<OutgoingGrad> out;
    core->run(out, true);
    CHECK_FALSE(core->next_is_light());
  }
  {
    auto b = torch::rand({3}, torch::requires_grad());
    b.register_hook([](at::Tensor g) { return g; });
    auto core = core_for(b.sum());
    std::vector<OutgoingGrad> out;
    core->run(out, true);
    CHECK_FALSE(core->next_is_light());  // b's AccumulateGrad runs b's hook
  }
}
