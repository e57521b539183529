// GraphTaskCore's light nodes (Note [Light nodes]): which nodes the graph task
// actor may run on its own thread, and that a light-only run stops before the
// first node that is not; and the order of a drain (Note [Drain order]).
#include <doctest/doctest.h>

#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include "engine/graph_task.hpp"

using castor::detail::GraphTaskCore;
using castor::detail::OutgoingGrad;

namespace {

std::vector<std::string> events;  // what ran, in order (single-threaded tests)

struct UserFunction : torch::autograd::Function<UserFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext*, at::Tensor x) { return x * 1; }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*, torch::autograd::variable_list g) {
    events.push_back("user function");
    return g;
  }
};

// A tensor received from worker 1 (message 7), as AutogradRuntime::on_receive
// makes it: an output of a RecvRpcBackward.
at::Tensor received_from_peer() {
  auto recv = std::make_shared<castor::detail::RecvRpcBackward>(castor::AutogradMessageId(1, 7), castor::WorkerId(1),
                                                                castor::ContextId(0, 1));
  auto t = torch::full({2}, 1.0);
  auto nr = recv->add_input_metadata(t);
  torch::autograd::impl::set_gradient_edge(t, torch::autograd::Edge(recv, nr));
  return t;
}

// `x` times 2, twice, each product noting its gradient's arrival as `name`1, `name`2.
at::Tensor noted_chain(const at::Tensor& x, const std::string& name) {
  auto first = x * 2;
  first.register_hook([name](at::Tensor g) { events.push_back(name + "1"); return g; });
  auto second = first * 2;
  second.register_hook([name](at::Tensor g) { events.push_back(name + "2"); return g; });
  return second;
}

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

TEST_CASE("a drain finishes one chain before it starts the next (D1 of Note [Drain order])") {
  events.clear();
  auto a = torch::rand({3}, torch::requires_grad());
  auto b = torch::rand({3}, torch::requires_grad());
  auto core = core_for(noted_chain(a, "a").sum() + noted_chain(b, "b").sum());
  std::vector<OutgoingGrad> out;
  core->run(out);
  CHECK(core->finished());
  REQUIRE(events.size() == 4);
  // Depth first: one chain's two products, then the other's. Breadth first
  // (a queue) would give a2 b2 a1 b1.
  CHECK(events[0][0] == events[1][0]);
  CHECK(events[2][0] == events[3][0]);
  CHECK(events[0][0] != events[2][0]);
  CHECK(events[0].back() == '2');
  CHECK(events[1].back() == '1');
}

TEST_CASE("a gradient for a peer leaves before the next heavy node, not before a light one (D2 of Note [Drain order])") {
  GraphTaskCore::SendEarly send_early = [](std::vector<OutgoingGrad>&& grads) {
    REQUIRE(grads.size() == 1);
    CHECK(grads[0].to == 1);
    CHECK(grads[0].send.packed == castor::AutogradMessageId(1, 7).packed);
    REQUIRE(grads[0].grads.size() == 1);
    CHECK(torch::allclose(grads[0].grads[0], torch::full({2}, 3.0)));
    events.push_back("sent");
  };
  SUBCASE("a heavy node comes next: the gradient goes before it runs") {
    events.clear();
    auto b = torch::rand({3}, torch::requires_grad());
    // The roots' edges are pushed in order, so the received tensor's sum
    // runs first; the user function is heavy.
    auto core = core_for(UserFunction::apply(b).sum() + (received_from_peer() * 3).sum());
    std::vector<OutgoingGrad> out;
    core->run(out, /*light_only=*/false, send_early);
    CHECK(core->finished());
    CHECK(out.empty());  // it left early
    CHECK(events == std::vector<std::string>{"sent", "user function"});
  }
  SUBCASE("only light nodes follow: the gradient stays for the drain's end") {
    events.clear();
    auto b = torch::rand({3}, torch::requires_grad());
    auto core = core_for((b * 2).sum() + (received_from_peer() * 3).sum());
    std::vector<OutgoingGrad> out;
    core->run(out, /*light_only=*/false, send_early);
    CHECK(core->finished());
    CHECK(events.empty());
    REQUIRE(out.size() == 1);  // handed back with the drain (C1 of Note [FAST mode] may apply)
    CHECK(torch::allclose(out[0].grads[0], torch::full({2}, 3.0)));
  }
}
