// Note [Masterless join]: with every address known up front no worker serves
// a rendezvous; each checks in with every other one. Real workers, loopback.
#include <doctest/doctest.h>

#include <future>

#include <ATen/ATen.h>

#include <caf/logger.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/runtime/testing.hpp"
#include "rref/rref.hpp"
#include "support/cluster.hpp"
#include "support/test_functions.hpp"

using namespace castor;
using namespace castor::test;
using std::chrono::milliseconds;

namespace {

std::vector<WorkerOptions> masterless_options(int n) {
  std::vector<uint16_t> ports;
  for (int r = 0; r < n; ++r) ports.push_back(free_port());
  std::vector<WorkerOptions> out;
  for (int r = 0; r < n; ++r) {
    auto o = local_options(r, n, ports[0]);
    o.port = ports[size_t(r)];
    for (int k = 0; k < n; ++k)
      o.cluster.push_back(WorkerOptions::Member{"worker" + std::to_string(k), "127.0.0.1", ports[size_t(k)]});
    out.push_back(o);
  }
  return out;
}

// Starts every rank at once, then waits (bounded) for every init.
std::vector<std::future<Worker>> start_all(const std::vector<WorkerOptions>& opts) {
  std::vector<std::future<Worker>> out;
  for (const auto& o : opts) out.push_back(std::async(std::launch::async, [o] { return init_rpc(o); }));
  for (auto& f : out)
    if (f.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      std::fprintf(stderr, "TEST HANG: a masterless init did not return within 60 s\n");
      std::_Exit(3);
    }
  return out;
}

// Starts rank 0 only once every other rank is trying to reach it: the
// others dial rank 0 first (J1: the higher rank connects), and until it
// listens they must retry, not fail.
std::vector<std::future<Worker>> start_rank0_last(const std::vector<WorkerOptions>& opts) {
  std::vector<std::future<Worker>> out(opts.size());
  for (size_t r = 1; r < opts.size(); ++r) out[r] = std::async(std::launch::async, [o = opts[r]] { return init_rpc(o); });
  if (!await_dialers(opts[0].port, opts.size() - 1, milliseconds(30000))) {
    std::fprintf(stderr, "TEST HANG: ranks 1..%zu did not all dial rank 0 within 30 s\n", opts.size() - 1);
    std::_Exit(3);
  }
  out[0] = std::async(std::launch::async, [o = opts[0]] { return init_rpc(o); });
  for (auto& f : out)
    if (f.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      std::fprintf(stderr, "TEST HANG: a masterless init did not return within 60 s\n");
      std::_Exit(3);
    }
  return out;
}

// Asks worker `to`'s actor, over `w`'s link to it, for its join record (a
// worker answers that also while its own init is still joining). Messages
// from one worker to another arrive in the order they were sent, so an
// answer means that everything `w` sent to `to` before has reached it.
std::string join_probe(Worker& w, WorkerId to) {
  auto& rt = castor::testing::runtime(w);
  auto peer = rt.world().peer(to);
  if (!peer) return "no link to rank " + std::to_string(to);
  std::string answer = "no answer";
  {
    caf::scoped_actor self{*rt.system};
    self->request(*peer, std::chrono::seconds(20), join_atom::value,
                  castor::detail::make_join_request(rt))
        .receive(
            [&](JoinReply& r) { answer = r.ok && r.workers.size() == 1 ? r.workers[0].name : "refused: " + r.error; },
            [&](caf::error& e) { answer = "error: " + rt.system->render(e); });
  }
  // The scoped actor left this thread holding the system's logger, which the
  // system's destructor waits for: w.shutdown() on this thread would hang.
  caf::logger::set_current_actor_system(nullptr);
  return answer;
}

}  // namespace

TEST_CASE("a masterless world, rank 0 starting last, runs calls and RRefs and shuts down") {
  auto futures = start_rank0_last(masterless_options(3));
  std::vector<Worker> w;
  for (auto& f : futures) w.push_back(f.get());
  CHECK(w[1].rpc_sync<int64_t>("worker2", "add_ints", 40, 2) == 42);
  CHECK(w[2].rpc_sync<std::string>("worker0", "whoami") == "worker0");
  auto r = w[0].remote<at::Tensor>("worker1", "aten::ones", std::vector<int64_t>{3});
  CHECK(w[0].rpc_sync<at::Tensor>("worker2", "rref_sum", r).item<double>() == 3);  // owner 1, user 2
  r = RRef<at::Tensor>();
  std::vector<std::future<void>> downs;
  for (auto& x : w) downs.push_back(std::async(std::launch::async, [&x] { x.shutdown(); }));
  for (auto& d : downs) {
    REQUIRE(d.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
    d.get();
  }
  for (auto& x : w) CHECK(x.rref_debug_info().at("num_owner_rrefs") == 0);
}

// J3 of Note [Masterless join]: rank 2 reaches rank 1 only through a relay
// that the test opens late, so rank 0's init returns (ranks 1 and 2 both
// connected to it) while rank 1 still waits for rank 2. rank 0 then calls
// worker1, and the test makes sure the call has reached worker1 before it
// lets rank 2 through. The call's nested call to worker2 must wait for
// worker1's init, not fail with "worker worker1 is shut down".
TEST_CASE("a call that reaches a worker before its masterless init returns waits for it") {
  auto opts = masterless_options(3);
  for (auto& o : opts) o.init_timeout = std::chrono::seconds(60);
  GatedRelay to_worker1(opts[1].port);
  opts[2].cluster[1].port = to_worker1.port();  // worker2's only way to worker1
  std::vector<std::future<Worker>> f;
  for (const auto& o : opts) f.push_back(std::async(std::launch::async, [o] { return init_rpc(o); }));
  REQUIRE(f[0].wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  auto w0 = f[0].get();
  auto call = w0.rpc_async<at::Tensor>("worker1", "chain", std::vector<std::string>{"worker2", "worker0"}, at::zeros({2}));
  CHECK(join_probe(w0, 1) == "worker1");  // the call has reached worker1...
  CHECK(f[1].wait_for(milliseconds(0)) == std::future_status::timeout);  // ...whose init waits for worker2
  CHECK_FALSE(call.is_done());  // held there (J3): it cannot have run, nor failed
  to_worker1.open();
  at::Tensor y;
  std::string error;
  try {
    y = call.wait(milliseconds(60000));
  } catch (const RpcError& e) {
    error = e.what();  // checked after every worker is up and shut down again
  }
  std::vector<Worker> w;
  w.push_back(std::move(w0));
  for (size_t r : {size_t(1), size_t(2)}) {
    REQUIRE(f[r].wait_for(std::chrono::seconds(60)) == std::future_status::ready);
    w.push_back(f[r].get());
  }
  std::vector<std::future<void>> downs;
  for (auto& x : w) downs.push_back(std::async(std::launch::async, [&x] { x.shutdown(); }));
  for (auto& d : downs) {
    REQUIRE(d.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
    d.get();
  }
  CHECK(error == "");
  REQUIRE(y.defined());
  CHECK(at::equal(y, at::full({2}, 3.0)));
}

TEST_CASE("a masterless init refuses an incompatible peer, naming it") {
  auto opts = masterless_options(2);
  for (auto& o : opts) o.init_timeout = std::chrono::seconds(5);
  opts[1].autograd_mode = AutogradMode::fast;
  auto futures = start_all(opts);
  std::vector<std::string> errors;
  for (auto& f : futures) {
    try {
      auto w = f.get();
      w.shutdown(false);
    } catch (const RpcError& e) {
      errors.push_back(e.what());
    }
  }
  REQUIRE_FALSE(errors.empty());
  bool named = false;
  for (auto& e : errors)
    named |= e.find("uses autograd mode 'fast', worker 'worker0' uses 'smart'") != std::string::npos ||
             e.find("uses autograd mode 'smart', worker 'worker1' uses 'fast'") != std::string::npos;
  INFO(errors.front());
  CHECK(named);
}

TEST_CASE("a masterless init names the worker at an address that is not the one the cluster lists") {
  auto opts = masterless_options(2);
  for (auto& o : opts) o.init_timeout = std::chrono::seconds(5);
  std::swap(opts[0].cluster[1].name, opts[0].cluster[0].name);  // worker0 thinks rank 1 is "worker0"
  opts[0].cluster[0].name = "worker0";
  opts[0].cluster[1].name = "trainer";
  auto futures = start_all(opts);
  try {
    futures[0].get();
    FAIL("worker0 joined a peer that is not the one its cluster lists");
  } catch (const RpcError& e) {
    CHECK(std::string(e.what()).find("is 'worker1' (rank 1), the cluster says 'trainer' (rank 1)") != std::string::npos);
  }
  try {
    futures[1].get().shutdown(false);
  } catch (const RpcError&) {
    // worker1 loses its peer during init: any error is fine here
  }
}
