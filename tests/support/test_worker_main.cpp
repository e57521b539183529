// castor_test_worker: one worker in its own process, for tests that kill
// peers or need separate processes.
// Usage: castor_test_worker RANK WORLD MASTER_PORT [KIND ENDING [READY_FILE]]
//        castor_test_worker probe|requester ...  (support/fork_probe.hpp)
//   KIND    what is live at the end (tests/integration/test_endings.cpp):
//           "context"   rank 0: an autograd context with a call to worker1 in it
//           "rrefs"     an owner RRef on each rank with a user RRef to it on
//                       the other (worker1 keeps its user in a static map)
//           "pending"   rank 0: an rpc_async to worker1 still running
//           "optimizer" rank 0: a DistributedOptimizer over worker1's
//                       parameters, a step of it in flight
//           "bulk"      rank 0: a tensor sent over the bulk link, and a
//                       second one still on its way (B7: its head written,
//                       its answer due: B14)
//           "arrival_round" rank 0: a push into a round of 2 on worker1's
//                       ArrivalRound, whose method runs on arrival (Note
//                       [Methods run on arrival]), waiting for the round,
//                       which worker1 closes 1.5 s later
//           "stream"    rank 0: 5000 small calls to worker1 sent without
//                       waiting (B13: the link's writer sends them in
//                       batches), most still on their way
//           "borrow"    rank 0 (a world of 3): worker1's add_ints called with
//                       an RRef of worker2's value, made 3 s later: worker1
//                       borrows the fork (G3 of Note [RRef protocol]), its
//                       fetch waiting on worker2, rank 0's pending child live
//           "early_gradient" rank 0 (a world of 3): a backward pass running
//                       on every rank: worker1 sent worker2 its gradient for
//                       a hop and runs a slow node (3 s) of its own (D2 of
//                       Note [Drain order])
//           "inspector" worker1: a `castor inspect` session with rank 0, open
//           "stuck"     worker1: a call from rank 0 stuck in user code for
//                       10 minutes (rank 0's own call timed out); every rank
//                       uses a 3 s shutdown bound (Note [Shutdown bound])
//   ENDING  how every rank ends: "shutdown", "shutdown_false" (shutdown(false)),
//           "destructor" (the Worker goes without shutdown()), "unwind" (an
//           exception unwinds through the live state), "killed" (rank 0
//           waits to be SIGKILLed; the others shut down)
//   READY_FILE  rank 0 writes it once the state is live; worker1 writes
//           READY_FILE.1 once its own part is, before rank 0 starts. The
//           other ranks wait for READY_FILE before an ending that does not
//           wait for them.
// With CASTOR_TEST_TLS_DIR set (support/certs.hpp made the files), every
// rank runs TLS; with CASTOR_TEST_BULK_SOCKET, large tensors go as bytes on
// the bulk links (B1), not copied from the peer's memory (B7).
// Exit 0 unless something failed; a crash shows as 128 + the signal.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "actors/observe/inspector.hpp"
#include "actors/runtime/testing.hpp"
#include "config/fork_server.hpp"
#include "engine/context.hpp"
#include "optimizer/dist_optimizer.hpp"
#include "rref/rref.hpp"
#include "support/certs.hpp"
#include "support/cluster.hpp"
#include "support/fork_probe.hpp"
#include "support/test_functions.hpp"

namespace {

using namespace std::chrono_literals;

struct Unwind : std::runtime_error {
  Unwind() : std::runtime_error("unwinding through live state on purpose") {}
};

void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void wait_for_file(const std::string& path, const char* what) {
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!std::ifstream(path).good()) {
    if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error(what);
    std::this_thread::sleep_for(10ms);
  }
}

// Everything a kind leaves live; destroyed after the ending (or with the
// Worker, for "destructor", or on the way out, for "unwind").
struct LiveState {
  std::optional<castor::autograd::Context> context;
  std::vector<castor::RRef<at::Tensor>> rrefs;
  std::optional<castor::RRef<ArrivalRound>> round;
  std::vector<castor::Future<int64_t>> calls;
  std::vector<castor::Future<at::Tensor>> tensor_calls;
  std::optional<castor::optim::DistributedOptimizer> optimizer;
  std::optional<castor::Future<void>> step;
  std::unique_ptr<castor::InspectionClient> inspection;
  std::future<void> backward;  // ends before `context` (declared after it)
};

// worker1's part, made before rank 0 starts its own.
void make_live_worker1(const std::string& kind, uint16_t master_port, LiveState& s) {
  if (kind == "inspector") {
    s.inspection = std::make_unique<castor::InspectionClient>("127.0.0.1", master_port, castor::TlsOptions{},
                                                                      "", 10s);
    expect(contains(s.inspection->snapshot(), "\"worker0\""), "the snapshot of worker0 does not name it");
  }
}

void make_live_rank0(castor::Worker& w, const std::string& kind, LiveState& s) {
  if (kind == "context") {
    s.context.emplace(w);
    auto x = at::ones({2}).set_requires_grad(true);
    auto y = w.rpc_sync<at::Tensor>("worker1", "my_add", x, x);
    expect(at::equal(y, at::full({2}, 2.0)), "my_add returned a wrong value");
  } else if (kind == "rrefs") {
    auto theirs = w.remote<at::Tensor>("worker1", "identity", at::ones({2}));
    expect(at::equal(theirs.to_here(), at::ones({2})), "worker1's RRef holds a wrong value");
    auto mine = w.make_rref(at::full({2}, 3.0));
    expect(w.rpc_sync<bool>("worker1", "hold", std::string("mine"), mine), "worker1's fork was not confirmed");
    s.rrefs = {theirs, mine};
  } else if (kind == "pending") {
    s.calls.push_back(w.rpc_async<int64_t>("worker1", "sleep_ms", int64_t(1500)));
  } else if (kind == "arrival_round") {
    auto round = w.remote<ArrivalRound>("worker1", "ArrivalRound", int64_t(2));
    s.calls.push_back(round.rpc_async<int64_t>("push", int64_t(3)));
    s.calls.push_back(round.rpc_async<int64_t>("close_in", int64_t(1500)));
    s.round = round;
  } else if (kind == "optimizer") {
    auto params = w.rpc_sync<std::vector<castor::RRef<at::Tensor>>>("worker1", "shared_linear_params");
    s.optimizer.emplace(w, castor::optim::SGD{0.1}, params);
    s.context.emplace(w);
    auto x = at::ones({3}).set_requires_grad(true);
    s.context->backward({w.rpc_sync<at::Tensor>("worker1", "my_add", x, x).sum()});
    s.step = s.optimizer->step_async(s.context->id());
  } else if (kind == "bulk") {
    auto big = at::arange(1 << 20, at::kFloat);  // 4 MiB: past the bulk threshold
    expect(at::equal(w.rpc_sync<at::Tensor>("worker1", "identity", big), big), "the bulk echo differs");
    // It went on the bulk link (TLS in a TLS world), not through CAF (B4).
    expect(castor::test::eventually([&] { return castor::testing::runtime(w).stats.bulk_sent.load() >= 1; },
                                    std::chrono::milliseconds(10000)),
           "the bulk echo did not take the bulk link");
    // The link is idle now (its frame counted as sent), so between processes
    // on one host (B7) the transfer in flight has its head written by this
    // thread and its answer due to the writer at the end (B14).
    auto heads = castor::testing::runtime(w).stats.heads_by_sender.load();
    s.tensor_calls.push_back(w.rpc_async<at::Tensor>("worker1", "identity", big));
    if (!std::getenv("CASTOR_TEST_BULK_SOCKET"))
      expect(castor::testing::runtime(w).stats.heads_by_sender.load() == heads + 1,
             "the transfer in flight did not leave its head from the sending thread (B14)");
  } else if (kind == "stream") {
    auto& stats = castor::testing::runtime(w).stats;
    expect(castor::test::eventually([&] {
      return w.rpc_sync<int64_t>("worker1", "add_ints", int64_t(1), int64_t(2)) == 3 && stats.lane_sent.load() >= 1;
    }, std::chrono::milliseconds(10000)), "small calls never took the lane");
    for (int64_t i = 0; i < 5000; ++i) s.calls.push_back(w.rpc_async<int64_t>("worker1", "add_ints", i, int64_t(1)));
  } else if (kind == "borrow") {
    // The RRef itself goes at once, as in the pipeline app: rank 0's
    // pending child keeps its fork until worker1's borrow ends (G2, G3).
    s.calls.push_back(w.rpc_async<int64_t>(
        "worker1", "add_ints", w.remote<int64_t>("worker2", "delayed_value", int64_t(3000), int64_t(41)), int64_t(1)));
    expect(castor::test::eventually([&] { return w.rref_debug_info().at("num_pending_children") == 1; },
                                    std::chrono::milliseconds(2000)),
           "the fork given to worker1 was not kept as a pending child");
  } else if (kind == "early_gradient") {
    s.context.emplace(w);
    auto x = at::ones({100, 100}).set_requires_grad(true);
    auto z = w.rpc_sync<at::Tensor>("worker1", "hop_beside_slow_backward", std::string("worker2"), int64_t(3000), x);
    auto* context = &*s.context;
    // Its outcome depends on the ending (done, or failed by the shutdown);
    // the processes' exit codes are what the test checks.
    s.backward = std::async(std::launch::async, [context, z] { context->backward({z.sum()}); });
    expect(castor::test::eventually([&] { return w.autograd_debug_info().at("num_running_graph_tasks") == 1; },
                                    std::chrono::milliseconds(10000)),
           "the backward pass did not start");
    std::this_thread::sleep_for(300ms);  // worker1's gradient for worker2 leaves before its slow node
  } else if (kind == "stuck") {
    try {
      w.rpc_sync<int64_t>("worker1", "sleep_ms", int64_t(600000), castor::Timeout{1500ms});
      throw std::runtime_error("a call of 10 minutes returned within its 1.5 s timeout");
    } catch (const castor::TimeoutError&) {
    }
  } else if (kind != "inspector") {
    throw std::invalid_argument("unknown KIND " + kind);
  }
}

// What a graceful shutdown says when a call is stuck past its bound.
void check_stuck_shutdown(castor::Worker& w) {
  try {
    w.shutdown();
  } catch (const castor::RpcError& e) {
    std::string why = e.what();
    bool named = contains(why, "'sleep_ms' on worker1, called by worker0, running for");
    bool timed_out = contains(why, "did not finish within 3.0 s (WorkerOptions::shutdown_timeout)");
    // worker1 may learn that rank 0 left before rank 0's word arrives.
    bool lost_rank0 = w.rank() != 0 && contains(why, "worker worker0 is unreachable; still running:");
    expect(named && (timed_out || lost_rank0), "unexpected shutdown error: " + why);
    std::fprintf(stderr, "castor_test_worker: as expected: %s\n", why.c_str());
    return;
  }
  throw std::runtime_error("shutdown() returned although a call is stuck for 10 minutes");
}

int run(castor::Worker& w, const std::string& kind, const std::string& ending, const std::string& ready_file,
        uint16_t master_port) {
  LiveState s;
  if (w.rank() == 1) {
    make_live_worker1(kind, master_port, s);
    if (!ready_file.empty()) std::ofstream(ready_file + ".1") << "ready\n";
  }
  if (w.rank() == 0) {
    if (!ready_file.empty()) wait_for_file(ready_file + ".1", "worker1 never made its state");
    make_live_rank0(w, kind, s);
    if (!ready_file.empty()) std::ofstream(ready_file) << "ready\n";
  }
  if (ending == "killed" && w.rank() == 0) {
    std::this_thread::sleep_for(60s);  // the test kills us long before
    return 3;
  }
  // Endings that do not wait for the others (all but a graceful shutdown)
  // wait for rank 0's state first: a peer that left before it would fail it.
  if (w.rank() != 0 && !ready_file.empty() && ending != "shutdown" && ending != "killed")
    wait_for_file(ready_file, "rank 0 never made its state");
  if (ending == "killed") {
    // A graceful shutdown with a dead peer fails, naming it; the survivor
    // then ends like any program that caught it.
    try {
      w.shutdown();
    } catch (const castor::RpcError& e) {
      if (!contains(e.what(), "worker worker0 is unreachable")) throw;
    }
  } else if (ending == "shutdown" && kind == "stuck") {
    check_stuck_shutdown(w);
  } else if (ending == "shutdown") {
    w.shutdown();
  } else if (ending == "shutdown_false") {
    w.shutdown(false);
  } else if (ending == "unwind") {
    throw Unwind();
  } else if (ending != "destructor") {
    throw std::invalid_argument("unknown ENDING " + ending);
  }
  return 0;  // `s` ends after the worker's shutdown, or with the Worker (destructor)
}

}  // namespace

int main(int argc, char** argv) {
  castor::config::serve_forks_if_asked(argc, argv);  // Note [Fork server]: ChildWorker's processes
  if (argc >= 2 && std::string(argv[1]) == "probe") return castor::test::fork_probe(argc, argv);
  if (argc >= 2 && std::string(argv[1]) == "requester") return castor::test::fork_requester(argc, argv);
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s RANK WORLD_SIZE MASTER_PORT [KIND ENDING [READY_FILE]]\n", argv[0]);
    return 2;
  }
  try {
    auto master_port = uint16_t(std::atoi(argv[3]));
    auto opts = castor::test::local_options(std::atoi(argv[1]), std::atoi(argv[2]), master_port);
    if (argc > 4 && std::string(argv[4]) == "stuck") opts.shutdown_timeout = 3s;
    // A TLS world: the test made the certificates (support/certs.hpp, ChildTls).
    if (const char* certs = std::getenv("CASTOR_TEST_TLS_DIR")) opts.tls = castor::test::tls_files(certs, opts.name);
    if (std::getenv("CASTOR_TEST_BULK_SOCKET")) opts.bulk_same_host = false;
    auto w = castor::init_rpc(opts);
    if (argc < 6) {
      w.shutdown();
      return 0;
    }
    return run(w, argv[4], argv[5], argc > 6 ? argv[6] : "", master_port);
  } catch (const Unwind&) {
    return 0;  // the live state and the Worker were destroyed on the way here
  } catch (const std::exception& e) {
    std::fprintf(stderr, "castor_test_worker: %s\n", e.what());
    return 1;
  }
}
