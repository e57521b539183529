// What a dead worker leaves behind (issue 18, part 2): a worker killed with
// SIGKILL while it holds state on a survivor -- an autograd context it
// created, a fork of the survivor's RRef, a call the survivor waits for --
// and the survivor releases all of it within the failure-detection bound,
// fails what waited with errors that name the dead worker, and says in
// castor inspect what it released. The dead worker is a real process.
#include <doctest/doctest.h>

#include <signal.h>

#include <nlohmann/json.hpp>

#include <ATen/ATen.h>

#include "actors/observe/inspection.hpp"
#include "actors/runtime/testing.hpp"
#include "rref/rref.hpp"
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

  child.kill();
  auto killed_at = std::chrono::steady_clock::now();
  auto call_error = error_of<UnreachableError>([&] { waiting.wait(milliseconds(20000)); });
  CHECK(contains(call_error, "worker worker1 is unreachable"));
  CHECK(contains(call_error, "'sleep_ms'"));
  // Released within the failure-detection bound (a closed socket: at once).
  CHECK(eventually([&] { return w0.autograd_debug_info().at("num_autograd_contexts") == 0; }, milliseconds(10000)));
  CHECK(eventually([&] { return w0.rref_debug_info().at("num_forks") == 0; }, milliseconds(10000)));
  CHECK(w0.autograd_debug_info().at("num_running_graph_tasks") == 0);
  CHECK(w0.autograd_debug_info().at("num_recv_functions") == 0);
  CHECK(std::chrono::steady_clock::now() - killed_at < std::chrono::seconds(10));
  CHECK(contains(error_of<OwnerDiedError>([&] { theirs.to_here(); }), "its owner, worker worker1, died"));

  auto snap = nlohmann::json::parse(castor::detail::inspection_json(castor::testing::runtime(w0)));
  auto& dead = snap["workers"][1];
  CHECK(dead["name"] == "worker1");
  CHECK(dead["alive"] == false);
  CHECK(dead.contains("dead_for_ms"));
  REQUIRE(dead.contains("released"));
  CHECK(dead["released"]["calls_failed"] == 1);
  CHECK(dead["released"]["rref_forks"] == 1);
  CHECK(dead["released"]["autograd_contexts"] == 1);
  CHECK_FALSE(snap["workers"][0].contains("released"));
  // The survivor's own value lives on (our handle), and it shuts down alone.
  CHECK(at::equal(mine.to_here(), at::ones({3})));
  CHECK(contains(error_of<UnreachableError>([&] { w0.shutdown(); }), "worker worker1 is unreachable"));
  CHECK(child.wait_exit(milliseconds(10000)) == 128 + SIGKILL);
}
