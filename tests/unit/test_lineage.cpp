// SMART mode's lineage (engine/lineage.hpp, Note [SMART mode]) on graphs
// built by hand: received tensors hang off recv functions the way
// AutogradRuntime::on_receive makes them, so each rule of the Note is checked
// without a second worker.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include <torch/torch.h>

#include "engine/lineage.hpp"

using namespace castor;
using namespace castor::detail;
using torch::autograd::Edge;

namespace {

const ContextId kCtx(0, 1);
const ContextId kOtherCtx(0, 2);  // an earlier iteration's context

uint64_t msg(WorkerId worker, uint64_t local) { return AutogradMessageId(worker, local).packed; }

// A recv function of `ctx` for message (worker, local), carrying `lineage`.
std::shared_ptr<RecvRpcBackward> recv_fn(WorkerId worker, uint64_t local, std::vector<uint64_t> lineage,
                                         ContextId ctx = kCtx) {
  auto r = std::make_shared<RecvRpcBackward>(AutogradMessageId(worker, local), worker, ctx);
  r->lineage = std::move(lineage);
  return r;
}

// A tensor received through `recv`, as on_receive makes it: an output of it.
torch::Tensor received(const std::shared_ptr<RecvRpcBackward>& recv, double value = 1.0) {
  auto t = torch::full({2}, value);
  auto nr = recv->add_input_metadata(t);
  torch::autograd::impl::set_gradient_edge(t, Edge(recv, nr));
  return t;
}

std::vector<uint64_t> lineage(const std::vector<torch::Tensor>& roots, ContextId ctx = kCtx) {
  std::vector<Edge> edges;
  for (const auto& t : roots) edges.push_back(torch::autograd::impl::gradient_edge(t));
  return lineage_of(ctx, edges);
}

std::vector<uint64_t> sorted(std::vector<uint64_t> xs) {
  std::sort(xs.begin(), xs.end());
  return xs;
}

std::set<uint64_t> ids_of(const std::vector<std::shared_ptr<SendRpcBackward>>& sends) {
  std::set<uint64_t> out;
  for (const auto& s : sends) out.insert(s->id().packed);
  return out;
}

}  // namespace

// L1: every recv upstream, plus what each of them received: the union,
// sorted, each id once however many paths lead to it.
TEST_CASE("a lineage is the recv functions upstream and their lineages, merged, sorted, each id once") {
  auto r1 = recv_fn(1, 7, {msg(2, 3), msg(0, 9)});
  auto r2 = recv_fn(2, 4, {msg(2, 3)});  // shares an upstream id with r1
  auto a = received(r1), b = received(r2);
  auto y = a * b + a.exp() * a;  // r1 reached on three paths
  auto l = lineage({y});
  CHECK(l == sorted({msg(0, 9), msg(1, 7), msg(2, 3), msg(2, 4)}));
  CHECK(std::is_sorted(l.begin(), l.end()));  // participating_sends binary-searches it
  // Only what the roots depend on: from `a` alone, r2 and its lineage are out.
  CHECK(lineage({a * 2}) == sorted({msg(0, 9), msg(1, 7), msg(2, 3)}));
  CHECK(lineage({b.sum()}) == sorted({msg(2, 3), msg(2, 4)}));
  // Several roots: the union.
  CHECK(lineage({a * 2, b * 3}) == l);
}

TEST_CASE("a graph with no recv function upstream has an empty lineage, edges without a function are skipped") {
  auto leaf = torch::ones({2}, torch::requires_grad());
  CHECK(lineage({(leaf * 3).sum()}).empty());
  CHECK(lineage({leaf}).empty());
  auto no_grad = torch::ones({2});
  CHECK(lineage({no_grad}).empty());  // its gradient edge has no function
  CHECK(lineage_of(kCtx, {}).empty());
  auto r = recv_fn(1, 1, {});
  CHECK(lineage({no_grad, received(r) * leaf}) == std::vector<uint64_t>{msg(1, 1)});
}

// What lies upstream of a recv function is on another worker; the lineage
// it carries stands for it, and the walk does not go past it.
TEST_CASE("the walk stops at a recv function: its lineage stands for what lies beyond it") {
  auto beyond = recv_fn(3, 3, {msg(3, 30)});
  auto r = recv_fn(1, 1, {msg(2, 2)});
  r->add_next_edge(Edge(beyond, 0));  // never so in a real graph: a recv has no inputs here
  CHECK(lineage({received(r) * 2}) == sorted({msg(1, 1), msg(2, 2)}));
}

// L4: a tensor kept from an earlier iteration hangs off a recv function of
// that iteration's context: neither it nor its lineage counts now.
TEST_CASE("recv functions of other contexts are not followed, nor their lineages taken (L4)") {
  auto old_recv = recv_fn(1, 1, {msg(2, 2)}, kOtherCtx);
  auto kept = received(old_recv) * 2;  // e.g. a parameter's copy from the last step
  auto now = recv_fn(1, 5, {msg(2, 6)});
  CHECK(lineage({(kept * received(now)).sum()}) == sorted({msg(1, 5), msg(2, 6)}));
  CHECK(lineage({kept}).empty());
  CHECK(lineage({kept}, kOtherCtx) == sorted({msg(1, 1), msg(2, 2)}));  // in its own context it counts
}

// L4's purpose: one context per training step, each step sending what the
// last step computed. Without L4 every send would carry the ids of every
// earlier step (the kept tensor's graph reaches all of them); with it, what a
// send carries does not grow however long the loop runs.
TEST_CASE("in a loop of one context per step, the lineage a send carries does not grow") {
  torch::Tensor carried = torch::ones({2}, torch::requires_grad());
  std::vector<size_t> sent_sizes;
  for (uint64_t k = 1; k <= 10; ++k) {
    CAPTURE(k);
    ContextId ctx(0, k);
    auto sent = lineage({carried}, ctx);  // our send of `carried` in step k (L1)
    sent_sizes.push_back(sent.size());
    // The peer answers with a tensor computed from it: its recv carries our
    // send's id and what that send carried.
    sent.push_back(msg(0, k));
    auto r = recv_fn(1, k, sorted(sent), ctx);
    carried = carried * received(r);
    CHECK(lineage({carried}, ctx) == sorted({msg(0, k), msg(1, k)}));  // within the step, it counts
  }
  CHECK(sent_sizes == std::vector<size_t>(10, 0));
}

TEST_CASE("FAST mode: every send of the context takes part, and no ids travel") {
  SendMap sends;
  for (uint64_t i = 1; i <= 3; ++i) sends[msg(0, i)] = std::make_shared<SendRpcBackward>(AutogradMessageId(0, i), 1);
  auto r = recv_fn(1, 1, {});
  auto p = participating_sends(AutogradMode::fast, kCtx, sends, {torch::autograd::impl::gradient_edge(received(r))},
                               std::nullopt);
  CHECK(ids_of(p.sends) == std::set<uint64_t>{msg(0, 1), msg(0, 2), msg(0, 3)});
  CHECK(p.ids.empty());
}

// L2 on the worker that calls backward: P is the lineage of its roots, and
// it waits only for its sends in P (a send of ours shows in P when a peer's
// answer that we use was computed from it).
TEST_CASE("SMART mode on the root: only the sends in the roots' lineage take part (L2)") {
  SendMap sends;
  auto add_send = [&](uint64_t local) {
    sends[msg(0, local)] = std::make_shared<SendRpcBackward>(AutogradMessageId(0, local), 1);
  };
  add_send(1);  // its result came back through r_used
  add_send(2);  // its result came back through r_unused, which the loss does not use
  add_send(3);  // fire and forget: nobody's answer depends on it
  auto r_used = recv_fn(1, 10, {msg(0, 1)});
  auto r_unused = recv_fn(1, 11, {msg(0, 2)});
  auto used = received(r_used);
  auto unused = received(r_unused);
  auto loss = (used * 2).sum();
  auto p = participating_sends(AutogradMode::smart, kCtx, sends, {torch::autograd::impl::gradient_edge(loss)},
                               std::nullopt);
  CHECK(ids_of(p.sends) == std::set<uint64_t>{msg(0, 1)});
  CHECK(p.ids == sorted({msg(0, 1), msg(1, 10)}));  // P, passed on with the gradients (L3)
}

// L3 elsewhere: P arrives with the first gradient; the worker's own graph
// (its roots are the recv functions' gradients) is not walked again.
TEST_CASE("SMART mode elsewhere: the participants that came with the gradient decide (L3)") {
  SendMap sends;
  for (uint64_t i = 1; i <= 3; ++i) sends[msg(2, i)] = std::make_shared<SendRpcBackward>(AutogradMessageId(2, i), 0);
  auto r = recv_fn(1, 1, {msg(2, 1), msg(2, 2), msg(2, 3)});  // would make every send take part
  std::vector<uint64_t> participants = sorted({msg(0, 7), msg(2, 3)});
  auto p = participating_sends(AutogradMode::smart, kCtx, sends,
                               {torch::autograd::impl::gradient_edge(received(r))}, participants);
  CHECK(ids_of(p.sends) == std::set<uint64_t>{msg(2, 3)});
  CHECK(p.ids == participants);
  auto none = participating_sends(AutogradMode::smart, kCtx, sends, {}, std::vector<uint64_t>{});
  CHECK(none.sends.empty());
}
