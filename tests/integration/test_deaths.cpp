// What a dead worker leaves behind (issue 18, part 2): a worker killed with
// SIGKILL while it holds state on a survivor -- an autograd context it
// created, a fork of the survivor's RRef, a call the survivor waits for --
// and the survivor releases all of it within the failure-detection bound,
// fails what waited with errors that name the dead worker, and says in
// castor inspect what it released. The dead worker is a real process.
// Then a worker killed at each point of each protocol (a fork not yet
// confirmed, a backward in flight, an optimizer step, a bulk transfer, a
// nested call, a context that reached a survivor only through the dead
// worker): every survivor's counts of RRefs, contexts, graph tasks and calls
// return to zero, and the survivors shut down together.
#include <doctest/doctest.h>

#include <signal.h>

#include <atomic>
#include <cstdio>
#include <exception>
#include <future>
#include <map>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include <ATen/ATen.h>

#include "actors/observe/inspection.hpp"
#include "actors/runtime/testing.hpp"
#include "engine/context.hpp"
#include "optimizer/dist_optimizer.hpp"
#include "rref/rref.hpp"
#include "support/certs.hpp"
#include "support/cluster.hpp"
#include "support/errors.hpp"
#include "support/test_functions.hpp"

using namespace castor;
using castor::test::contains;
using castor::test::error_of;
using castor::test::eventually;
using std::chrono::milliseconds;

TEST_CASE("a killed worker's context, forks and calls are released on the survivor, and castor inspect says so") {
  auto port = test::free_port();
  test::ChildWorker child(1, 2, port);
  auto w0 = init_rpc(test::local_options(0, 2, port));
  // worker1 creates a context and records a call to us in it: our part of it lives here.
  auto context_id = w0.rpc_sync<int64_t>("worker1", "open_context_with", std::string("worker0"));
  CHECK(context_id != 0);
  CHECK(w0.autograd_debug_info().at("num_autograd_contexts") == 1);
  // worker1 holds a fork of a value we own.
  auto mine = w0.make_rref(at::ones({3}));
  CHECK(w0.rpc_sync<bool>("worker1", "hold", "m", mine));
  CHECK(eventually([&] { return w0.rref_debug_info().at("num_forks") == 1; }));
  // A call we wait for, and an RRef that worker1 owns.
  auto waiting = w0.rpc_async<int64_t>("worker1", "sleep_ms", int64_t(60000));
  auto theirs = w0.remote<at::Tensor>("worker1", "identity", at::ones({2}));
  CHECK(at::equal(theirs.to_here(), at::ones({2})));
  // Only the sleep_ms call is in flight to worker1 when it dies (the count
  // of calls released below is exact).
  auto outgoing_to_worker1 = [&] {
    auto snap = nlohmann::json::parse(castor::detail::inspection_json(castor::testing::runtime(w0)));
    return snap["calls"]["outgoing_in_flight"].value("worker1", int64_t(-1));
  };
  CHECK(eventually([&] { return outgoing_to_worker1() == 1; }, milliseconds(10000)));

  child.kill();
  auto killed_at = std::chrono::steady_clock::now();
  auto call_error = error_of<UnreachableError>([&] { waiting.wait(milliseconds(20000)); });
  CHECK(contains(call_error, "worker worker1 is unreachable"));
  CHECK(contains(call_error, "'sleep_ms'"));
  // Released within the failure-detection bound (a closed socket: at once).
  // The context actor forgets the context before it lets go of its recv
  // functions (J1 of Note [Context cleanup]), and the owner counts a fork
  // gone before it notes it released: each count is waited for.
  CHECK(eventually([&] { return w0.autograd_debug_info().at("num_autograd_contexts") == 0; }, milliseconds(10000)));
  CHECK(eventually([&] { return w0.autograd_debug_info().at("num_recv_functions") == 0; }, milliseconds(10000)));
  CHECK(eventually([&] { return w0.rref_debug_info().at("num_forks") == 0; }, milliseconds(10000)));
  CHECK(w0.autograd_debug_info().at("num_running_graph_tasks") == 0);
  CHECK(std::chrono::steady_clock::now() - killed_at < std::chrono::seconds(10));
  CHECK(contains(error_of<OwnerDiedError>([&] { theirs.to_here(); }), "its owner, worker worker1, died"));

  nlohmann::json snap;
  CHECK(eventually([&] {
    snap = nlohmann::json::parse(castor::detail::inspection_json(castor::testing::runtime(w0)));
    return snap["workers"][1].value("released", nlohmann::json::object()).value("rref_forks", 0) == 1;
  }, milliseconds(10000)));
  auto& dead = snap["workers"][1];
  CHECK(dead["name"] == "worker1");
  CHECK(dead["alive"] == false);
  CHECK(dead.contains("dead_for_ms"));
  REQUIRE(dead.contains("released"));
  INFO("released after worker1's death: ", dead["released"].dump());
  CHECK(dead["released"]["calls_failed"] == 1);
  CHECK(dead["released"]["rref_forks"] == 1);
  CHECK(dead["released"]["autograd_contexts"] == 1);
  CHECK_FALSE(snap["workers"][0].contains("released"));
  // The survivor's own value lives on (our handle), and it shuts down alone.
  CHECK(at::equal(mine.to_here(), at::ones({3})));
  CHECK(contains(error_of<UnreachableError>([&] { w0.shutdown(); }), "worker worker1 is unreachable"));
  CHECK(child.wait_exit(milliseconds(10000)) == 128 + SIGKILL);
}

// Note [Methods run on arrival]: a pusher killed while its push waits in a
// round; the round completes without it and its reply goes nowhere.
TEST_CASE("a worker killed while its push waits in a round run on arrival: the owner serves on and releases its fork") {
  auto port = test::free_port();
  test::ChildWorker child(1, 2, port);
  auto w0 = init_rpc(test::local_options(0, 2, port));
  auto round = w0.remote<ArrivalRound>("worker0", "ArrivalRound", int64_t(2));
  auto theirs = w0.rpc_async<int64_t>("worker1", "push_to_round", round, int64_t(3));  // worker1 pushes 3 and waits
  CHECK(eventually([&] { return round.rpc_sync<std::vector<int64_t>>("log") == std::vector<int64_t>{3}; },
                   milliseconds(20000)));
  child.kill();
  CHECK(contains(error_of<UnreachableError>([&] { theirs.wait(milliseconds(20000)); }), "worker worker1 is unreachable"));
  CHECK(eventually([&] { return w0.rref_debug_info().at("num_forks") == 0; }, milliseconds(10000)));
  // The dead worker's push counts; the round's last push completes it.
  CHECK(round.rpc_sync<int64_t>("push", int64_t(4)) == 7);
  auto five = round.rpc_async<int64_t>("push", int64_t(5));
  CHECK(round.rpc_sync<int64_t>("close") == 1);
  CHECK(five.wait(milliseconds(20000)) == 5);
  CHECK(round.rpc_sync<std::vector<int64_t>>("log") == std::vector<int64_t>{3, 4, 5});
  CHECK(contains(error_of<UnreachableError>([&] { w0.shutdown(); }), "worker worker1 is unreachable"));
  CHECK(child.wait_exit(milliseconds(10000)) == 128 + SIGKILL);
}

TEST_CASE("a worker that goes silent without closing its sockets is found dead within the connection timeout") {
  // Note [Silent peers]: the child runs with castor's defaults (heartbeats
  // on); we drop a link silent for 5 s instead of 30 s to keep this short.
  auto port = test::free_port();
  test::ChildWorker child(1, 2, port);
  auto o = test::local_options(0, 2, port);
  o.caf_settings["middleman.connection-timeout"] = "5s";
  auto w0 = init_rpc(o);
  auto worker1_alive = [&] {
    auto snap = nlohmann::json::parse(castor::detail::inspection_json(castor::testing::runtime(w0)));
    return snap["workers"][1]["alive"].get<bool>();
  };
  // A live peer with nothing to say stays: its heartbeats keep the link
  // past our timeout.
  std::this_thread::sleep_for(milliseconds(7000));
  CHECK(worker1_alive());
  CHECK(w0.rpc_sync<int64_t>("worker1", "sleep_ms", int64_t(1)) == 1);

  // Stopped, its sockets stay open and say nothing (a host cut off).
  auto waiting = w0.rpc_async<int64_t>("worker1", "sleep_ms", int64_t(60000));
  REQUIRE_MESSAGE(child.freeze(), "worker1 did not stop");
  auto stopped_at = std::chrono::steady_clock::now();
  auto call_error = error_of<UnreachableError>([&] { waiting.wait(milliseconds(30000)); });
  auto found_after = std::chrono::steady_clock::now() - stopped_at;
  CHECK(contains(call_error, "worker worker1 is unreachable (connection lost while calling 'sleep_ms')"));
  CHECK_FALSE(worker1_alive());
  // Not before the timeout; within it and one heartbeat tick (Q1), with slack for a loaded machine.
  CHECK(found_after >= milliseconds(4000));
  CHECK(found_after < milliseconds(15000));
  CHECK(contains(error_of<UnreachableError>([&] { w0.rpc_sync<int64_t>("worker1", "sleep_ms", int64_t(1)); }),
                 "worker worker1 is unreachable"));
  CHECK(contains(error_of<UnreachableError>([&] { w0.shutdown(); }), "worker worker1 is unreachable"));
  child.kill();
  CHECK(child.wait_exit(milliseconds(10000)) == 128 + SIGKILL);
}

namespace {

// Every count of held state on `w`, as rref_debug_info, autograd_debug_info
// and castor inspect's calls report them.
std::map<std::string, int64_t> held_counts(Worker& w) {
  auto out = w.rref_debug_info();
  for (const auto& [k, v] : w.autograd_debug_info()) out[k] = v;
  auto snap = nlohmann::json::parse(castor::detail::inspection_json(castor::testing::runtime(w)));
  int64_t outgoing = 0;
  for (const auto& [peer, n] : snap["calls"]["outgoing_in_flight"].items()) outgoing += n.get<int64_t>();
  out["calls_outgoing"] = outgoing;
  out["calls_incoming"] = snap["calls"]["incoming_in_flight"].get<int64_t>();
  return out;
}

std::string nonzero(const std::map<std::string, int64_t>& counts) {
  std::string out;
  for (const auto& [k, v] : counts)  // cumulative totals are not state held
    if (v != 0 && !(k.size() > 6 && k.compare(k.size() - 6, 6, "_total") == 0)) out += k + "=" + std::to_string(v) + " ";
  return out;
}

// One world: survivors worker0 and worker2 here, worker1 a child process
// killed (SIGKILL) at `point`; then every survivor's counts return to zero.
void kill_worker1_at(const std::string& point) {
  auto port = test::free_port();
  // Under TLS the bulk link is a TLS session (B6 of Note [Bulk path]), its
  // bytes on the socket: the kill cuts a session mid-record.
  bool tls = point == "bulk transfer, TLS";
  auto certs = tls ? test::make_certs("deaths", {"worker0", "worker1", "worker2"}) : std::string();
  std::optional<test::ChildTls> child_tls;
  if (tls) child_tls.emplace(certs, false);  // the child's files; the sender below puts bytes on the socket
  test::ChildWorker child(1, 3, port);
  child_tls.reset();
  auto o0 = test::local_options(0, 3, port);
  auto o2 = test::local_options(2, 3, port);
  if (tls) {
    o0.tls = test::tls_files(certs, "worker0");
    o2.tls = test::tls_files(certs, "worker2");
    o0.bulk_same_host = false;
  }
  if (point == "fork not yet confirmed")  // the owner's confirmations are late: worker1 dies first
    o2.faults.rules = {FaultRule{"child_accept", 0, 0, milliseconds(2000)}, FaultRule{"ack", 0, 0, milliseconds(2000)}};
  if (point == "remote() waiting for its argument's fork, its creator killed")  // the owner confirms late
    o0.faults.rules = {FaultRule{"ack", 0, 0, milliseconds(2000)}};
  if (point == "small calls queued behind a large one" || point == "gradients queued behind a large frame")
    o0.bulk_same_host = false;  // the bytes on the socket
  auto starting2 = std::async(std::launch::async, [o2] { return init_rpc(o2); });
  auto w0 = init_rpc(o0);
  auto w2 = starting2.get();
  w0.on_worker_failure([](const WorkerFailure&) {});  // the survivors carry on (Note [Shutdown with survivors])
  // A failed REQUIRE unwinds past three live workers: the survivors'
  // destructors would shut down gracefully one after the other, the first
  // waiting for the second, which has not begun (a hang until ctest's
  // timeout). On a failure, worker1 is killed and both stop at once.
  struct EndOnFailure {
    test::ChildWorker& child;
    Worker& w0;
    Worker& w2;
    ~EndOnFailure() {
      if (std::uncaught_exceptions() == 0) return;
      child.kill();
      for (auto* w : {&w0, &w2}) {
        try {
          w->shutdown(false);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "test_deaths: shutdown(false) of %s after a failure: %s\n", w->name().c_str(), e.what());
        }
      }
    }
  } end_on_failure{child, w0, w2};
  std::vector<Future<int64_t>> int_calls;
  std::vector<Future<bool>> bool_calls;
  std::vector<Future<at::Tensor>> tensor_calls;
  std::vector<Future<int64_t>> stream_calls;  // their values are i + 1
  std::atomic<bool> stream_stop{false};
  std::thread streaming;
  // A failed REQUIRE below unwinds past a running stream: stop and join it
  // first (a joinable std::thread's destructor would end the process).
  struct StreamJoin {
    std::atomic<bool>& stop;
    std::thread& thread;
    ~StreamJoin() {
      stop = true;
      if (thread.joinable()) thread.join();
    }
  } stream_join{stream_stop, streaming};
  std::string expected_error = "worker worker1 is unreachable";
  {
    std::optional<autograd::Context> ctx;
    std::optional<optim::DistributedOptimizer> opt;
    std::future<void> backward;
    std::optional<Future<void>> step;
    RRef<at::Tensor> shared;
    RRef<int64_t> slow_value;
    std::optional<Future<int64_t>> fetching;
    if (point == "fork not yet confirmed") {
      // worker0 shares its user RRef of worker2's value with worker1.
      shared = w0.remote<at::Tensor>("worker2", "identity", at::ones({2}));
      bool_calls.push_back(w0.rpc_async<bool>("worker1", "hold_and_sleep", std::string("k"), shared, int64_t(60000)));
      // The owner has worker1's fork (next to worker0's own), but neither
      // worker1 nor worker0 has its confirmation yet.
      REQUIRE(eventually([&] { return w2.rref_debug_info().at("num_forks") == 2; }, milliseconds(10000)));
      // worker0's context counts its child from a message posted before the
      // call left, which the count on worker2 does not wait for.
      CHECK(eventually([&] { return w0.rref_debug_info().at("num_pending_children") == 1; }, milliseconds(10000)));
    } else if (point == "a borrowed fork's fetch waiting, the borrower killed") {
      // G3 of Note [RRef protocol]: worker1's value_sum takes the value of
      // worker0's RRef of worker2's value, which waits at a gate: worker1
      // borrows the fork, its fetch waits on worker2, and worker0's pending
      // child keeps worker0's fork. worker1 dies: worker0 drops the pending
      // child, and worker2 answers the fetch into a dead link once the gate
      // opens after the kill.
      auto& gate = test::gate("borrower killed");
      gate.reset();
      shared = w0.remote<at::Tensor>("worker2", "gated_value", std::string("borrower killed"), at::ones({2}));
      REQUIRE(gate.wait_arrived(1, milliseconds(20000)));
      tensor_calls.push_back(w0.rpc_async<at::Tensor>("worker1", "value_sum", shared));
      REQUIRE(eventually([&] { return w2.rref_debug_info().at("num_pending_futures") == 1; }, milliseconds(10000)));
      // The fetch can arrive before worker0's context has counted its child
      // and worker2's has counted the creator's fork (each an actor's
      // message, sent before the call left): both counts are waited for.
      CHECK(eventually([&] { return w0.rref_debug_info().at("num_pending_children") == 1; }, milliseconds(10000)));
      // worker0's fork only: a borrowed fork is never counted.
      CHECK(eventually([&] { return w2.rref_debug_info().at("num_forks") == 1; }, milliseconds(10000)));
      CHECK(w2.rref_debug_info().at("num_pending_futures") == 1);
    } else if (point == "backward in flight") {
      ctx.emplace(w0);
      auto x = at::ones({2}).set_requires_grad(true);
      auto y = w0.rpc_sync<at::Tensor>("worker2", "my_add", x, x);
      auto z = w0.rpc_sync<at::Tensor>("worker1", "slow_backward", y, int64_t(60000));
      backward = std::async(std::launch::async, [&ctx, z] { ctx->backward({z.sum()}); });
      REQUIRE(eventually([&] { return w0.autograd_debug_info().at("num_running_graph_tasks") == 1; }));
      std::this_thread::sleep_for(milliseconds(200));  // worker1 is inside the slow backward
    } else if (point == "a context that reached worker2 only through it" ||
               point == "a context that reached worker2 only through it, released before the kill") {
      // worker0 never talked to worker2: its cleanup would travel through
      // worker1 (Note [Context cleanup], the dead link). worker2 asks
      // worker0 to reach it directly, before worker0 releases the context
      // or, in the second case, after (worker1, frozen, never passed the
      // cleanup on): then worker0 answers with the cleanup.
      ctx.emplace(w0);
      auto x = at::ones({2}).set_requires_grad(true);
      CHECK(at::equal(w0.rpc_sync<at::Tensor>("worker1", "chain", std::vector<std::string>{"worker2"}, x), x + 2));
      CHECK(w2.autograd_debug_info().at("num_autograd_contexts") == 1);
      if (point != "a context that reached worker2 only through it") {
        REQUIRE(child.freeze());
        ctx.reset();
        CHECK(w0.autograd_debug_info().at("num_autograd_contexts") == 0);
        CHECK(w2.autograd_debug_info().at("num_autograd_contexts") == 1);
      }
    } else if (point == "a gradient sent ahead of a slow node") {
      // D2 of Note [Drain order]: worker1 sends worker2 its gradient, then
      // runs its slow node; it dies there. worker2 got a request from it
      // and answers into a dead link.
      ctx.emplace(w0);
      auto x = at::ones({100, 100}).set_requires_grad(true);
      auto z = w0.rpc_sync<at::Tensor>("worker1", "hop_beside_slow_backward", std::string("worker2"), int64_t(60000), x);
      auto grads_on_w2 = [&] {
        return castor::testing::runtime(w2).stats.received[size_t(castor::detail::MessageType::backward_grad)].load();
      };
      auto grads_before = grads_on_w2();
      backward = std::async(std::launch::async, [&ctx, z] { ctx->backward({z.sum()}); });
      REQUIRE(eventually([&] { return grads_on_w2() == grads_before + 1; }, milliseconds(10000)));
    } else if (point == "optimizer step") {
      auto params = w0.rpc_sync<std::vector<RRef<at::Tensor>>>("worker1", "shared_linear_params");
      auto more = w0.rpc_sync<std::vector<RRef<at::Tensor>>>("worker2", "shared_linear_params");
      params.insert(params.end(), more.begin(), more.end());
      opt.emplace(w0, optim::SGD{0.1}, params);
      ctx.emplace(w0);
      auto x = at::ones({3}).set_requires_grad(true);
      ctx->backward({w0.rpc_sync<at::Tensor>("worker1", "my_add", x, x).sum()});
      step = opt->step_async(ctx->id());
    } else if (point == "bulk transfer" || tls) {
      // The link is up and carries tensors (with TLS: a TLS session), so the
      // transfer below is on it, not sent through CAF instead (B4).
      auto warm = at::arange(int64_t(1) << 18, at::kFloat);
      CHECK(at::equal(w0.rpc_sync<at::Tensor>("worker1", "identity", warm), warm));
      CHECK(eventually([&] { return castor::testing::runtime(w0).stats.bulk_sent.load() == 1; }, milliseconds(10000)));
      auto big = at::arange(int64_t(16) << 20, at::kFloat);  // 64 MiB over the bulk link
      tensor_calls.push_back(w0.rpc_async<at::Tensor>("worker1", "identity", big));
      // Mid-transfer: "the bulk link to worker worker1 broke: ..."; after it,
      // "worker worker1 is unreachable": both name it and the cause.
      expected_error = "worker worker1";
    } else if (point == "a large call's head written by its sender, the answer due") {
      // B14 of Note [Bulk path]: on an idle link the calling thread writes
      // the head (the tensor's address) and the writer waits for worker1's
      // answer; worker1 is frozen, so the answer never comes, and the kill
      // ends the writer's wait: the call fails naming worker1.
      auto warm = at::arange(int64_t(1) << 18, at::kFloat);
      CHECK(at::equal(w0.rpc_sync<at::Tensor>("worker1", "identity", warm), warm));
      auto& stats = castor::testing::runtime(w0).stats;
      REQUIRE(eventually([&] { return stats.bulk_sent.load() == 1; }, milliseconds(10000)));  // the link is idle
      REQUIRE(child.freeze());
      auto heads = stats.heads_by_sender.load();
      tensor_calls.push_back(w0.rpc_async<at::Tensor>("worker1", "identity", at::arange(int64_t(1) << 20, at::kFloat)));
      CHECK(stats.heads_by_sender.load() == heads + 1);
      REQUIRE(eventually([&] { return held_counts(w0).at("calls_outgoing") == 1; }, milliseconds(10000)));
      expected_error = "worker worker1";
    } else if (point == "small calls queued behind a large one") {
      // B9 of Note [Bulk path]: a 64 MiB tensor on the socket keeps the
      // link's writer busy while 100 small calls queue behind it, to leave
      // in batches; the kill cuts the link with some of them written and
      // some still queued. Every one fails, naming worker1.
      auto warm = at::arange(int64_t(1) << 18, at::kFloat);
      CHECK(at::equal(w0.rpc_sync<at::Tensor>("worker1", "identity", warm), warm));
      auto big = at::arange(int64_t(16) << 20, at::kFloat);
      tensor_calls.push_back(w0.rpc_async<at::Tensor>("worker1", "identity", big));
      for (int i = 0; i < 100; ++i) int_calls.push_back(w0.rpc_async<int64_t>("worker1", "sleep_ms", int64_t(60000)));
      expected_error = "worker worker1";
    } else if (point == "gradients queued behind a large frame") {
      // B10 of Note [Bulk path]: a backward pass's gradients for worker1 go
      // on the open lane, behind a 64 MiB call whose bytes are on the
      // socket; the kill cuts the link under them. One gradient sleeps in
      // worker1's backward, so the pass is still running at the kill: it
      // fails naming worker1, and what the link did not send goes through
      // CAF to a dead peer, which drops it.
      auto warm = at::arange(int64_t(1) << 18, at::kFloat);
      CHECK(at::equal(w0.rpc_sync<at::Tensor>("worker1", "identity", warm), warm));
      ctx.emplace(w0);
      auto x = at::ones({2}).set_requires_grad(true);
      std::vector<at::Tensor> ys;
      for (int i = 0; i < 20; ++i) ys.push_back(w0.rpc_sync<at::Tensor>("worker1", "my_add", x, x));
      ys.push_back(w0.rpc_sync<at::Tensor>("worker1", "slow_backward", x, int64_t(60000)));
      auto loss = at::stack(ys).sum();
      auto big = at::arange(int64_t(16) << 20, at::kFloat);
      tensor_calls.push_back(w0.rpc_async<at::Tensor>("worker1", "identity", big));
      backward = std::async(std::launch::async, [&ctx, loss] { ctx->backward({loss}); });
      REQUIRE(eventually([&] { return w0.autograd_debug_info().at("num_running_graph_tasks") == 1; }));
      expected_error = "worker worker1";
    } else if (point == "small calls on the lane") {
      // B8: once worker0's link to worker1 is open, small calls ride it;
      // four of them wait on worker1 at the kill.
      auto& stats = castor::testing::runtime(w0).stats;
      CHECK(eventually([&] {
        return w0.rpc_sync<int64_t>("worker1", "add_ints", int64_t(1), int64_t(2)) == 3 && stats.lane_sent.load() >= 1;
      }, milliseconds(10000)));
      auto before = stats.lane_sent.load();
      for (int i = 0; i < 4; ++i) int_calls.push_back(w0.rpc_async<int64_t>("worker1", "sleep_ms", int64_t(60000)));
      CHECK(eventually([&] { return stats.lane_sent.load() == before + 4; }, milliseconds(10000)));
      REQUIRE(eventually([&] { return held_counts(w0).at("calls_outgoing") == 4; }, milliseconds(10000)));
    } else if (point == "a stream of small calls in batches") {
      // B13 of Note [Bulk path]: one thread calls without waiting, so its
      // calls leave through the link's writer in batches; the kill cuts the
      // link mid-stream. Every call ends: with its value, or failing and
      // naming worker1.
      auto& stats = castor::testing::runtime(w0).stats;
      CHECK(eventually([&] {
        return w0.rpc_sync<int64_t>("worker1", "add_ints", int64_t(1), int64_t(2)) == 3 && stats.lane_sent.load() >= 1;
      }, milliseconds(10000)));
      stream_stop = false;
      streaming = std::thread([&] {
        for (int64_t i = 0; i < 200000 && !stream_stop.load(); ++i)
          stream_calls.push_back(w0.rpc_async<int64_t>("worker1", "add_ints", i, int64_t(1)));
      });
      // 200 replies back on the lane, so that calls have completed.
      const auto replies = stats.lane_received.load();
      REQUIRE(eventually([&] { return stats.lane_received.load() > replies + 200; }, milliseconds(10000)));
    } else if (point == "remote() started on arrival, its creator killed") {
      // V2 of Note [Values on arrival]: worker1's remote() runs on worker2 as
      // it arrives and waits at a gate; worker2's owner counts worker1's
      // fork beside it. worker1 dies before the value exists: the owner
      // ends with the dead fork, and the function, let go after the kill,
      // finishes into a value nobody owns and an acknowledgement to nobody.
      auto& gate = test::gate("creator killed");
      gate.reset();
      auto started = w2.rref_debug_info().at("values_started_on_arrival_total");
      CHECK(w0.rpc_sync<bool>("worker1", "hold_gated_remote", std::string("k"), std::string("worker2"),
                              std::string("creator killed")));
      REQUIRE(gate.wait_arrived(1, milliseconds(20000)));
      CHECK(w2.rref_debug_info().at("values_started_on_arrival_total") == started + 1);
      REQUIRE(eventually([&] { return w2.rref_debug_info().at("num_forks") == 1; }, milliseconds(10000)));
      CHECK(held_counts(w2).at("calls_incoming") == 1);
    } else if (point == "remote() waiting for its argument's fork, its creator killed") {
      // worker1 holds a user RRef of worker0's value and passes it to a
      // remote() on worker2, which waits for worker0 to confirm its fork
      // (the acks are late) before the call runs. worker1 dies meanwhile:
      // the call runs after worker2 knows its creator dead, and the value's
      // owner ends at once with that error (L2 of Note [Light owners]); no
      // fork of the dead creator is counted, so nothing is left on worker2.
      shared = w0.make_rref(at::ones({2}));
      CHECK(w0.rpc_sync<bool>("worker1", "hold", std::string("arg"), shared));
      CHECK(w0.rpc_sync<bool>("worker1", "remote_held_to", std::string("arg"), std::string("worker2")));
      REQUIRE(eventually([&] { return w2.rref_debug_info().at("num_pending_users") == 1; }, milliseconds(10000)));
      CHECK(w2.rref_debug_info().at("num_owner_rrefs") == 0);  // the call waits: no owner yet
    } else if (point == "an RRef argument fetched by a callee, its owner killed") {
      // worker1 makes the value slowly; worker2's sleep_ms takes it by value
      // and waits for it. worker1 dies: the call fails as worker1's
      // Unreachable error, not worker2's (to a caller that reads an
      // Unreachable error of a method's owner as that owner's death, as
      // RRef methods do, worker2 would look dead).
      slow_value = w0.remote<int64_t>("worker1", "sleep_ms", int64_t(60000));
      fetching = w0.rpc_async<int64_t>("worker2", "sleep_ms", slow_value);
      REQUIRE(eventually([&] { return held_counts(w2).at("calls_incoming") == 1; }, milliseconds(10000)));
    } else if (point == "nested call") {
      // worker1 calls worker0 back twice; worker0 is serving both at the kill.
      int_calls.push_back(w0.rpc_async<int64_t>("worker1", "fan_out", std::string("worker0"), int64_t(2), int64_t(1500)));
      REQUIRE(eventually([&] { return held_counts(w0).at("calls_incoming") == 2; }, milliseconds(10000)));
    }
    child.kill();
    if (point == "remote() started on arrival, its creator killed") test::gate("creator killed").open();
    if (point == "a borrowed fork's fetch waiting, the borrower killed") test::gate("borrower killed").open();
    if (streaming.joinable()) {
      std::this_thread::sleep_for(milliseconds(50));  // calls after the kill, too
      stream_stop = true;
      streaming.join();
    }
    if (backward.valid()) {
      REQUIRE(backward.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
      CHECK(contains(error_of<UnreachableError>([&] { backward.get(); }), "worker1"));
    }
    if (step) {  // it may have ended before the kill; if not, it fails naming worker1
      REQUIRE(eventually([&] { return step->is_done(); }, milliseconds(20000)));
      if (auto e = step->error()) CHECK(contains(e->what(), "worker1"));
    }
    if (fetching) {
      try {
        fetching->wait(milliseconds(20000));
        FAIL("worker2's call with worker1's value returned after worker1 died");
      } catch (const UnreachableError& e) {
        CHECK(e.info().worker == "worker1");
        CHECK(contains(e.what(), "worker worker2: argument 1 of 'sleep_ms'"));
      }
    }
    shared = RRef<at::Tensor>();
    slow_value = RRef<int64_t>();
    if (opt) opt.reset();
  }  // the context ends here
  for (auto& f : bool_calls) CHECK(contains(error_of<UnreachableError>([&] { f.wait(milliseconds(20000)); }), expected_error));
  for (auto& f : int_calls) CHECK(contains(error_of<UnreachableError>([&] { f.wait(milliseconds(20000)); }), expected_error));
  for (auto& f : tensor_calls) {
    auto error = error_of<UnreachableError>([&] { f.wait(milliseconds(20000)); });
    CHECK_MESSAGE(contains(error, expected_error), error);
  }
  if (!stream_calls.empty()) {
    int64_t ok = 0, failed = 0;
    std::string odd;
    for (size_t i = 0; i < stream_calls.size(); ++i) {
      try {
        if (stream_calls[i].wait(milliseconds(20000)) == int64_t(i) + 1) ++ok; else odd = "a wrong value";
      } catch (const UnreachableError& e) {
        if (contains(e.what(), "worker1")) ++failed; else odd = e.what();
      } catch (const RpcError& e) {
        odd = e.what();
      }
    }
    CAPTURE(ok);
    CAPTURE(failed);
    CHECK_MESSAGE(odd.empty(), odd);  // nothing else: no other error, no timeout
    CHECK(ok + failed == int64_t(stream_calls.size()));
    CHECK(ok >= 200);
    CHECK(failed >= 1);
  }
  // Within the failure-detection bound (a closed socket: at once), plus the
  // 1.5 s nested calls and the 2 s late confirmations above.
  for (auto* w : {&w0, &w2}) {
    CAPTURE(w->name());
    std::map<std::string, int64_t> counts;
    CHECK(eventually([&] { return nonzero(counts = held_counts(*w)).empty(); }, milliseconds(10000)));
    CHECK(nonzero(counts) == "");
  }
  auto stopping2 = std::async(std::launch::async, [&] { w2.shutdown(); });
  CHECK_NOTHROW(w0.shutdown());
  REQUIRE(stopping2.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  CHECK_NOTHROW(stopping2.get());
  CHECK(child.wait_exit(milliseconds(10000)) == 128 + SIGKILL);
}

}  // namespace

TEST_CASE("a worker killed at each point of each protocol: every survivor's counts return to zero, nothing hangs") {
  for (std::string point : {"a borrowed fork's fetch waiting, the borrower killed", "fork not yet confirmed",
                            "backward in flight", "a context that reached worker2 only through it",
                            "a context that reached worker2 only through it, released before the kill",
                            "a gradient sent ahead of a slow node",
                            "optimizer step", "bulk transfer", "a large call's head written by its sender, the answer due",
                            "bulk transfer, TLS", "small calls on the lane", "small calls queued behind a large one",
                            "gradients queued behind a large frame", "a stream of small calls in batches",
                            "remote() started on arrival, its creator killed",
                            "remote() waiting for its argument's fork, its creator killed", "nested call",
                            "an RRef argument fetched by a callee, its owner killed"}) {
    CAPTURE(point);
    kill_worker1_at(point);
  }
}
