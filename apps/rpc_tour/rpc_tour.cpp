// rpc-tour: the RFC's calls on three workers, each its own process: a sync
// call, async calls, a nested call across workers, and a remote error.
#include <cstdio>
#include <sstream>

#include <ATen/ATen.h>

#include "apps/common/app.hpp"

namespace {

using castor::current_worker;

std::string show(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes() << " sum=" << t.sum().item<double>();
  return out.str();
}

}  // namespace

CASTOR_FUNCTION(tour_add, [](at::Tensor a, at::Tensor b) {
  std::printf("tour_add(%s, %s) runs here\n", show(a).c_str(), show(b).c_str());
  std::fflush(stdout);
  return a + b;
});

// Adds one, then passes the tensor on to the next worker of `route`.
CASTOR_FUNCTION(tour_hop, [](std::vector<std::string> route, at::Tensor t) -> at::Tensor {
  std::printf("tour_hop: got %s, %zu hop(s) to go\n", show(t).c_str(), route.size());
  std::fflush(stdout);
  if (route.empty()) return t + 1;
  auto next = route.front();
  route.erase(route.begin());
  return current_worker().rpc_sync<at::Tensor>(next, "tour_hop", route, t + 1);  // its own handle is not defined yet
});

CASTOR_FUNCTION(tour_fail, [](std::string why) -> int64_t { throw std::runtime_error(why); });

namespace {

int run_tour(castor::Worker& w, const castor::apps::Flags&) {
  if (w.rank() != 0) return 0;  // the others serve until rank 0 is done
  auto say = [](const std::string& s) {
    std::printf("%s\n", s.c_str());
    std::fflush(stdout);
  };
  auto a = at::ones({2, 2});
  say("1. rpc_sync: worker1 adds two tensors");
  auto c = w.rpc_sync("worker1", tour_add, a, a);  // a typed handle: the result type is deduced
  say("   -> " + show(c));

  say("2. rpc_async: two calls in flight at once, a registered function and a builtin");
  auto f1 = w.rpc_async(1, tour_add, a, c);  // a worker by its rank
  auto f2 = w.rpc_async<at::Tensor>("worker2", "aten::matmul", c, c);  // operators go by name
  say("   -> worker1: " + show(f1.wait()) + ", worker2 aten::matmul: " + show(f2.wait()));

  say("3. nested: worker1 calls worker2, which calls back to worker0");
  auto hops = w.rpc_sync("worker1", tour_hop, std::vector<std::string>{"worker2", "worker0"}, at::zeros({3}));
  say("   -> " + show(hops) + " (one per hop)");

  say("4. a remote error comes back as castor::RemoteError");
  try {
    w.rpc_sync(2, tour_fail, "the model diverged");
  } catch (const castor::RemoteError& e) {
    say(std::string("   -> caught: ") + e.what());
  }
  say("done: shutting down (each worker waits until all work everywhere has finished)");
  return 0;
}

castor::apps::AppRegistrar tour{castor::apps::App{
    "rpc-tour", "the RFC's calls (sync, async, nested, remote error) on three workers", 3, nullptr, run_tour, nullptr}};

}  // namespace
