// Distributed autograd (FAST mode) across real workers: the gradients equal
// those of the same computation run locally with plain libtorch autograd.
#include <doctest/doctest.h>

#include <cstdlib>
#include <future>
#include <thread>

#include <torch/torch.h>

#include "actors/runtime/testing.hpp"
#include "engine/context.hpp"
#include "rref/rref.hpp"
#include "support/cluster.hpp"
#include "support/test_functions.hpp"
#include "support/errors.hpp"

using namespace castor;
using castor::test::contains;
using castor::test::error_of;
using castor::test::LocalWorld;
using castor::test::eventually;
using std::chrono::milliseconds;

namespace {
torch::Tensor leaf(std::vector<int64_t> sizes, int seed) {
  torch::manual_seed(seed);
  return torch::randn(sizes, torch::kDouble).requires_grad_(true);
}
torch::Tensor twin(const torch::Tensor& t) { return t.detach().clone().requires_grad_(true); }
bool close(const torch::Tensor& a, const torch::Tensor& b) { return torch::allclose(a, b, 1e-6, 1e-6); }
// These oracle tests run twice (see tests/CMakeLists.txt): in FAST mode and,
// with CASTOR_TEST_AUTOGRAD_MODE=smart, in SMART mode.
WorkerOptions fast(WorkerOptions& o) {
  const char* mode = std::getenv("CASTOR_TEST_AUTOGRAD_MODE");
  o.autograd_mode = mode && std::string(mode) == "smart" ? AutogradMode::smart : AutogradMode::fast;
  return o;
}
uint64_t received(Worker& w, castor::detail::MessageType t) {
  return castor::testing::runtime(w).stats.received[size_t(t)].load();
}
// A local node whose backward throws (a custom Function: never a light node).
struct LocalExplosion : torch::autograd::Function<LocalExplosion> {
  static at::Tensor forward(torch::autograd::AutogradContext*, at::Tensor x) { return x * 1; }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*, torch::autograd::variable_list) {
    throw std::runtime_error("local backward exploded");
  }
};
int64_t contexts_on(Worker& w) { return w.autograd_debug_info().at("num_autograd_contexts"); }
bool no_context_anywhere(LocalWorld& world) {
  for (size_t i = 0; i < world.size(); ++i)
    if (contexts_on(world[i]) != 0 || world[i].autograd_debug_info().at("num_running_graph_tasks") != 0) return false;
  return true;
}
}  // namespace

TEST_CASE("one hop: gradients equal local autograd, and .grad stays untouched") {
  LocalWorld world(2, [](WorkerOptions& o) { fast(o); });
  auto a = leaf({3, 3}, 1), b = leaf({3, 3}, 2);
  {
    autograd::Context ctx(world[0]);
    auto c = world[0].rpc_sync<torch::Tensor>("worker1", "my_add", a, b);
    auto loss = (c * c).sum();
    ctx.backward({loss});
    auto grads = ctx.gradients();
    auto a2 = twin(a), b2 = twin(b);
    auto c2 = a2 + b2;
    (c2 * c2).sum().backward();
    REQUIRE(grads.size() == 2);
    CHECK(close(grads.at(a), a2.grad()));
    CHECK(close(grads.at(b), b2.grad()));
    CHECK_FALSE(a.grad().defined());
    // Iterating yields the user's own leaf tensors.
    for (const auto& [t, g] : grads)
      CHECK((t.unsafeGetTensorImpl() == a.unsafeGetTensorImpl() || t.unsafeGetTensorImpl() == b.unsafeGetTensorImpl()));
    CHECK(world[0].autograd_debug_info().at("num_send_functions") == 1);
    CHECK(world[0].autograd_debug_info().at("num_recv_functions") == 1);
  }
  CHECK(eventually([&] { return no_context_anywhere(world); }));
}

TEST_CASE("a chain over 4 workers with nested calls") {
  LocalWorld world(4, [](WorkerOptions& o) { fast(o); });
  auto x = leaf({2, 2}, 3);
  autograd::Context ctx(world[0]);
  auto out = world[0].rpc_sync<torch::Tensor>("worker1", "chain", std::vector<std::string>{"worker2", "worker3"},
                                              x * 2);
  auto loss = (out * out * out).sum();
  ctx.backward({loss});
  auto x2 = twin(x);
  auto o2 = x2 * 2 + 3;
  (o2 * o2 * o2).sum().backward();
  CHECK(close(ctx.gradients().at(x), x2.grad()));
}

TEST_CASE("a diamond, repeated round trips, reused results, mixed requires_grad and broadcasting") {
  LocalWorld world(3, [](WorkerOptions& o) { fast(o); });
  auto x = leaf({4, 3}, 4);
  auto w = leaf({3, 3}, 5);
  auto bias = leaf({3}, 6);
  auto frozen = torch::randn({4, 3}, torch::kDouble);  // requires no grad
  autograd::Context ctx(world[0]);
  // Diamond: two workers use x, the results meet again here.
  auto y1 = world[0].rpc_sync<torch::Tensor>("worker1", "mul_pair", x, x);
  auto y2 = world[0].rpc_sync<torch::Tensor>("worker2", "mul_pair", x, x * 3);
  // Three round trips to worker1, with a bias that broadcasts over the rows.
  auto t = y1 + y2;
  for (int i = 0; i < 3; ++i) t = world[0].rpc_sync<torch::Tensor>("worker1", "lin", t.tanh(), w, bias);
  // A result that comes back and is sent again; a frozen input.
  auto r = world[0].rpc_sync<torch::Tensor>("worker2", "mul_pair", t, frozen);
  auto s = world[0].rpc_sync<torch::Tensor>("worker2", "mul_pair", r, x);
  auto e = world[0].rpc_sync<torch::Tensor>("worker1", "aten::expand", bias, std::vector<int64_t>{4, 3});
  auto loss = (r + s + e).pow(2).sum();
  ctx.backward({loss});
  auto grads = ctx.gradients();

  auto x2 = twin(x), w2 = twin(w), b2 = twin(bias);
  auto t2 = x2 * x2 + x2 * (x2 * 3);
  for (int i = 0; i < 3; ++i) t2 = t2.tanh().matmul(w2) + b2;
  auto r2 = t2 * frozen;
  auto s2 = r2 * x2;
  ((r2 + s2 + b2.expand({4, 3})).pow(2).sum()).backward();
  CHECK(grads.size() == 3);
  CHECK(close(grads.at(x), x2.grad()));
  CHECK(close(grads.at(w), w2.grad()));
  CHECK(close(grads.at(bias), b2.grad()));
  CHECK(grads.count(frozen) == 0);
}

TEST_CASE("nested rpc inside a remote function, RRef.to_here paths and the four-worker example") {
  LocalWorld world(4, [](WorkerOptions& o) { fast(o); });
  auto a = leaf({3}, 7), b = leaf({3}, 8);
  autograd::Context ctx(world[0]);
  auto n = world[0].rpc_sync<torch::Tensor>("worker1", "nested_mul", "worker2", a, b);  // (a * b) * a
  auto rr = world[0].remote<torch::Tensor>("worker3", "mul_pair", a, b);
  auto v1 = rr.to_here();
  auto v2 = rr.to_here();  // fetched twice, both used
  // Four workers, every send receives a gradient: 0 -> 1 -> 2 -> 3 -> 0.
  auto f1 = world[0].rpc_sync<torch::Tensor>("worker1", "tanh_of", a + b);
  auto f2 = world[0].rpc_sync<torch::Tensor>("worker2", "mul_pair", f1, a);
  auto f3 = world[0].rpc_sync<torch::Tensor>("worker3", "my_add", f2, f1);
  auto loss = (n + v1 * v2 + f3).sum();
  ctx.backward({loss});
  auto a2 = twin(a), b2 = twin(b);
  auto g1 = (a2 + b2).tanh();
  ((a2 * b2 * a2 + (a2 * b2) * (a2 * b2) + (g1 * a2 + g1)).sum()).backward();
  auto grads = ctx.gradients();
  CHECK(close(grads.at(a), a2.grad()));
  CHECK(close(grads.at(b), b2.grad()));
}

TEST_CASE("tensor hooks are honoured and the backward may run on another thread") {
  LocalWorld world(2, [](WorkerOptions& o) { fast(o); });
  auto x = leaf({3}, 9);
  autograd::Context ctx(world[0]);
  auto y = world[0].rpc_sync<torch::Tensor>("worker1", "hooked", x);
  auto loss = y.sum();
  auto id = ctx.id();
  std::thread other([&] { autograd::backward(world[0], id, {loss}); });
  other.join();
  CHECK(close(ctx.gradients().at(x), torch::full({3}, 20.0, torch::kDouble)));
  // Nested contexts on one thread are refused.
  CHECK_THROWS_WITH_AS(autograd::Context{world[0]}, doctest::Contains("nested autograd contexts"), AutogradError);
}

TEST_CASE("concurrent contexts from two workers on a third keep their gradients apart") {
  LocalWorld world(3, [](WorkerOptions& o) { fast(o); });
  auto run = [&](int w, double scale, int64_t& ctx_id) {
    for (int pass = 0; pass < 10; ++pass) {
      autograd::Context ctx(world[size_t(w)]);
      ctx_id = ctx.id();
      torch::Tensor loss;
      for (int i = 0; i < 5; ++i) {
        auto x = torch::full({3}, scale, torch::kDouble).requires_grad_(true);
        auto y = world[size_t(w)].rpc_sync<torch::Tensor>("worker2", "use_param", x).sum();
        loss = loss.defined() ? loss + y : y;
      }
      ctx.backward({loss});
      // worker2's gradient of its shared parameter, in this context only: 5 x's.
      auto g = world[size_t(w)].rpc_sync<torch::Tensor>("worker2", "param_grad", ctx.id());
      CHECK(close(g.to(torch::kDouble), torch::full({3}, 5 * scale, torch::kDouble)));
    }
  };
  int64_t c0 = 0, c1 = 0;
  std::thread t0([&] { run(0, 1.0, c0); });
  std::thread t1([&] { run(1, 5.0, c1); });
  t0.join();
  t1.join();
  CHECK(c0 != c1);
  CHECK(eventually([&] { return no_context_anywhere(world); }));
}

TEST_CASE("retain_graph accumulates -- a second backward without it is refused") {
  LocalWorld world(2, [](WorkerOptions& o) { fast(o); });
  auto x = leaf({3}, 10);
  autograd::Context ctx(world[0]);
  auto y = world[0].rpc_sync<torch::Tensor>("worker1", "mul_pair", x, x);
  auto loss = y.sum();
  ctx.backward({loss}, true);
  ctx.backward({loss}, true);
  CHECK(close(ctx.gradients().at(x), 4 * x.detach()));
  ctx.backward({loss});  // the last one may release the graph
  CHECK(close(ctx.gradients().at(x), 6 * x.detach()));
  CHECK_THROWS_WITH_AS(ctx.backward({loss}), doctest::Contains("without retain_graph=true"), AutogradError);
}

TEST_CASE("an error in a remote node fails the whole pass, naming the worker -- the context still cleans up") {
  LocalWorld world(3, [](WorkerOptions& o) { fast(o); });
  auto x = leaf({3}, 11);
  {
    autograd::Context ctx(world[0]);
    auto y = world[0].rpc_sync<torch::Tensor>("worker1", "explode", x);
    auto z = world[0].rpc_sync<torch::Tensor>("worker2", "mul_pair", x, x);
    auto msg = error_of([&] { ctx.backward({(y + z).sum()}); });
    CHECK(msg.find("worker worker1") != std::string::npos);
    CHECK(msg.find("backward exploded") != std::string::npos);
  }
  CHECK(eventually([&] { return no_context_anywhere(world); }));
}

TEST_CASE("a forward pass in a context wakes no context actor, the first backward spawns them and sees every call (Note [Forward inbox])") {
  LocalWorld world(2, [](WorkerOptions& o) { fast(o); });
  auto running = [&](size_t i) { return castor::testing::runtime(world[i]).system->registry().running(); };
  auto a = leaf({3, 3}, 21), b = leaf({3, 3}, 22);
  CHECK(close(world[0].rpc_sync<torch::Tensor>("worker1", "my_add", a, b), a + b));  // links up, outside a context
  const auto before0 = running(0), before1 = running(1);
  {
    autograd::Context ctx(world[0]);
    // F2: 20 calls in the context, each with a send and a recv function on
    // both sides, and not one actor more on either worker.
    auto sum = torch::zeros({3, 3}, torch::kDouble);
    for (int i = 0; i < 20; ++i) sum = sum + world[0].rpc_sync<torch::Tensor>("worker1", "my_add", a, b);
    CHECK(running(0) == before0);
    CHECK(running(1) == before1);
    CHECK(world[0].autograd_debug_info().at("num_send_functions") == 20);
    CHECK(world[1].autograd_debug_info().at("num_recv_functions") == 20);
    // F1: the backward finds all 20 (and the gradients of local autograd).
    ctx.backward({(sum * sum).sum()});
    auto grads = ctx.gradients();
    auto a2 = twin(a), b2 = twin(b);
    auto sum2 = 20 * (a2 + b2);
    (sum2 * sum2).sum().backward();
    CHECK(close(grads.at(a), a2.grad()));
    CHECK(close(grads.at(b), b2.grad()));
    CHECK(running(0) > before0);  // now the context has its actor here
  }
  CHECK(eventually([&] { return no_context_anywhere(world); }));
  CHECK(eventually([&] { return running(0) == before0 && running(1) == before1; }));
  // A context that ends without a backward pass is cleaned up everywhere too.
  {
    autograd::Context ctx(world[0]);
    world[0].rpc_sync<torch::Tensor>("worker1", "my_add", a, b);
    CHECK(contexts_on(world[1]) == 1);
  }
  CHECK(eventually([&] { return no_context_anywhere(world); }));
}

TEST_CASE("context cleanup reaches every worker it touched, also through nested calls") {
  LocalWorld world(4, [](WorkerOptions& o) { fast(o); });
  auto x = leaf({2}, 12);
  {
    autograd::Context ctx(world[0]);
    // worker0 only talks to worker1; worker1 talks to worker2 and worker3.
    world[0].rpc_sync<torch::Tensor>("worker1", "chain", std::vector<std::string>{"worker2", "worker3"}, x);
    CHECK(eventually([&] { return contexts_on(world[3]) == 1; }));
  }
  CHECK(eventually([&] { return no_context_anywhere(world); }));
}

TEST_CASE("nothing is recorded outside a context or for tensors without grad") {
  LocalWorld world(2, [](WorkerOptions& o) { fast(o); });
  auto x = leaf({2}, 13);
  auto y = world[0].rpc_sync<torch::Tensor>("worker1", "mul_pair", x, x);
  CHECK(y.requires_grad());  // a fresh leaf: the flag travels, no graph does
  CHECK(y.grad_fn() == nullptr);
  CHECK(world[0].autograd_debug_info().at("num_send_functions") == 0);
  CHECK(world[1].autograd_debug_info().at("num_recv_functions") == 0);
  {
    autograd::Context ctx(world[0]);
    world[0].rpc_sync<torch::Tensor>("worker1", "mul_pair", torch::ones({2}), torch::ones({2}));
    CHECK(world[0].autograd_debug_info().at("num_send_functions") == 0);
  }
}

TEST_CASE("gradients going back to their sender carry the answer: no BackwardDone on a hop or a chain (C1)") {
  LocalWorld world(4, [](WorkerOptions& o) { fast(o); });
  using castor::detail::MessageType;
  auto x = leaf({2, 2}, 14), y = leaf({2, 2}, 15);
  std::vector<uint64_t> grads_before, done_before;
  for (size_t i = 0; i < world.size(); ++i) {
    grads_before.push_back(received(world[i], MessageType::backward_grad));
    done_before.push_back(received(world[i], MessageType::backward_done));
  }
  {
    autograd::Context ctx(world[0]);
    auto one_hop = world[0].rpc_sync<torch::Tensor>("worker1", "my_add", x, y);
    ctx.backward({one_hop.sum()});
    CHECK(close(ctx.gradients().at(x), torch::ones({2, 2}, torch::kDouble)));
  }
  {
    autograd::Context ctx(world[0]);
    auto chained = world[0].rpc_sync<torch::Tensor>("worker1", "chain", std::vector<std::string>{"worker2", "worker3"}, x);
    ctx.backward({chained.sum()});
    CHECK(close(ctx.gradients().at(x), torch::ones({2, 2}, torch::kDouble)));
  }
  CHECK(eventually([&] { return no_context_anywhere(world); }));
  // One gradient each way per hop: worker0 <-> worker1 twice, worker1 <-> worker2 <-> worker3 once.
  CHECK(received(world[0], MessageType::backward_grad) - grads_before[0] == 2);
  CHECK(received(world[1], MessageType::backward_grad) - grads_before[1] == 3);
  CHECK(received(world[2], MessageType::backward_grad) - grads_before[2] == 2);
  CHECK(received(world[3], MessageType::backward_grad) - grads_before[3] == 1);
  for (size_t i = 0; i < world.size(); ++i)
    CHECK_MESSAGE(received(world[i], MessageType::backward_done) == done_before[i], "worker", i);
}

TEST_CASE("a node failing on the caller after the remote part has ended fails the pass there (C2)") {
  LocalWorld world(2, [](WorkerOptions& o) { fast(o); });
  auto x = leaf({3}, 16);
  {
    autograd::Context ctx(world[0]);
    // The remote part (my_add) ends when it sends its gradient back; the
    // node that then fails is worker0's, after that gradient arrived.
    auto y = world[0].rpc_sync<torch::Tensor>("worker1", "my_add", LocalExplosion::apply(x), x);
    auto msg = error_of<AutogradError>([&] { ctx.backward({y.sum()}); });
    CHECK(msg.find("worker worker0: backward pass in autograd context") != std::string::npos);
    CHECK(msg.find("local backward exploded") != std::string::npos);
  }
  CHECK(eventually([&] { return no_context_anywhere(world); }));
}

TEST_CASE("a gradient that is not answered within the pass's timeout fails the pass, naming the worker (W2)") {
  LocalWorld world(2, [](WorkerOptions& o) { fast(o); });
  auto x = leaf({3}, 17);
  {
    autograd::Context ctx(world[0]);
    // worker1's part is stuck in user code for 8 s; the pass allows 300 ms.
    auto y = world[0].rpc_sync<torch::Tensor>("worker1", "slow_backward", x, int64_t(8000));
    auto started = std::chrono::steady_clock::now();
    auto msg = error_of([&] { ctx.backward({y.sum()}, false, Timeout{milliseconds(300)}); });
    auto waited = std::chrono::steady_clock::now() - started;
    CHECK(msg.find("worker worker1 did not answer the gradients sent to it") != std::string::npos);
    CHECK(msg.find("within 300 ms") != std::string::npos);
    CHECK(waited < milliseconds(6000));  // failed on its deadline, not when worker1 woke up
  }
  CHECK(eventually([&] { return no_context_anywhere(world); }));
}

// BW1 of Note [Backward at shutdown]: a backward() waiting on another thread
// when its worker stops without waiting (shutdown(false)) ends at once; it
// waited forever before (the endings test with an early gradient found it).
TEST_CASE("a backward() waiting when its worker shuts down without waiting fails, naming the worker and context (BW1)") {
  LocalWorld world(2);
  auto x = leaf({3}, 19);
  auto ctx = std::make_shared<autograd::Context>(world[0]);
  // worker1's part sleeps 8 s in user code: the pass is running at the stop.
  auto y = world[0].rpc_sync<torch::Tensor>("worker1", "slow_backward", x, int64_t(8000));
  auto outcome = std::make_shared<std::promise<std::string>>();
  auto message = outcome->get_future();
  // Detached, so that a wait that never ends fails the REQUIRE below instead
  // of hanging the test in a joining destructor.
  std::thread([ctx, y, outcome] { outcome->set_value(error_of<ShutdownError>([&] { ctx->backward({y.sum()}); })); })
      .detach();
  REQUIRE(eventually([&] { return world[0].autograd_debug_info().at("num_running_graph_tasks") == 1; }));
  auto stopped = std::chrono::steady_clock::now();
  world[0].shutdown(false);
  REQUIRE(message.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK(std::chrono::steady_clock::now() - stopped < milliseconds(6000));  // not when worker1's node woke up
  CHECK(contains(message.get(), "worker worker0 shut down during the backward pass in autograd context " +
                                    std::to_string(ctx->id())));
  // A backward() after the stop fails at once.
  CHECK(contains(error_of<ShutdownError>([&] { ctx->backward({y.sum()}); }), "worker0 is shut down"));
}

// D2 of Note [Drain order]: worker1's part runs on an executor thread (its
// tensors are too big for light nodes); the gradient it owes worker2 is ready
// before its user function's node, and must not wait for it.
TEST_CASE("a worker sends a peer its gradient before its own heavy node runs (D2 of Note [Drain order])") {
  LocalWorld world(3, [](WorkerOptions& o) { fast(o); });
  using castor::detail::MessageType;
  auto x = leaf({100, 100}, 18);
  {
    auto& gate = castor::test::gate("drain order");
    gate.reset();
    castor::test::OpenOnExit open_gate{gate};
    autograd::Context ctx(world[0]);
    auto y = world[0].rpc_sync<torch::Tensor>("worker1", "hop_beside_gated_backward", std::string("worker2"),
                                              std::string("drain order"), x);
    auto before = received(world[2], MessageType::backward_grad);
    auto pass = std::async(std::launch::async, [&] { ctx.backward({y.sum()}); });
    REQUIRE(gate.wait_arrived(1, milliseconds(20000)));  // worker1 is inside its gated node
    CHECK(eventually([&] { return received(world[2], MessageType::backward_grad) == before + 1; }, milliseconds(10000)));
    gate.open();
    REQUIRE(pass.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
    pass.get();
    // y = x + x * x
    CHECK(close(ctx.gradients().at(x), 1 + 2 * x.detach()));
  }
  {
    // The node after the early gradient throws: the pass fails naming
    // worker1, and worker2's part, answered to nobody, is released.
    autograd::Context ctx(world[0]);
    auto y = world[0].rpc_sync<torch::Tensor>("worker1", "hop_beside_explosion", std::string("worker2"), x);
    auto msg = error_of<AutogradError>([&] { ctx.backward({y.sum()}); });
    CHECK(msg.find("worker worker1") != std::string::npos);
    CHECK(msg.find("backward exploded") != std::string::npos);
  }
  CHECK(eventually([&] { return no_context_anywhere(world); }));
}
