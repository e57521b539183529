// RPC between real workers over loopback TCP: calls, builtins, nesting,
// errors, timeouts, dead peers, graceful shutdown.
#include <doctest/doctest.h>

#include <unistd.h>

#include <fstream>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <ATen/ATen.h>

#include <future>

#include <caf/send.hpp>

#include "actors/runtime/testing.hpp"
#include "actors/api/worker.hpp"
#include "support/cluster.hpp"
#include "support/captured_output.hpp"
#include "support/test_functions.hpp"
#include "support/errors.hpp"

using namespace castor;
using castor::test::contains;
using castor::test::error_of;
using castor::test::bounded;
using castor::test::LocalWorld;
using std::chrono::milliseconds;

TEST_CASE("rpc_sync, rpc_async and calls to self return the function's result") {
  LocalWorld world(2);
  auto a = at::ones({2, 3});
  auto b = at::full({2, 3}, 2.0);
  auto c = world[0].rpc_sync<at::Tensor>("worker1", "my_add", a, b);
  CHECK(at::equal(c, at::full({2, 3}, 3.0)));

  auto f = world[0].rpc_async<int64_t>("worker1", "add_ints", 40, 2);
  CHECK(f.wait() == 42);
  CHECK(f.is_done());
  CHECK(world[1].rpc_sync<std::string>("worker0", "concat", "ab", std::string("cd")) == "abcd");
  CHECK(world[0].rpc_sync<std::string>("worker1", "whoami") == "worker1");

  // A call to oneself is not serialized, but a value passed by copy stays a copy.
  auto t = at::arange(4, at::kFloat);
  auto same = world[0].rpc_sync<at::Tensor>("worker0", "identity", t);
  CHECK(at::equal(same, t));
  CHECK(same.data_ptr() != t.data_ptr());
  CHECK(world[0].rpc_sync<std::string>("worker0", "whoami") == "worker0");
  world[0].rpc_sync<void>("worker1", "noop");
}

TEST_CASE("ATen operators are callable by name, overloads chosen from the arguments") {
  LocalWorld world(2);
  auto a = at::rand({3, 3});
  auto b = at::rand({3, 3});
  CHECK(at::allclose(world[0].rpc_sync<at::Tensor>("worker1", "aten::add", a, b), a + b));
  CHECK(at::allclose(world[0].rpc_sync<at::Tensor>("worker1", "aten::add", a, 2.5), a + 2.5));
  CHECK(at::allclose(world[0].rpc_sync<at::Tensor>("worker1", "aten::matmul", a, b), at::matmul(a, b)));
  CHECK(at::allclose(world[0].rpc_sync<at::Tensor>("worker1", "aten::sum", a), a.sum()));
  CHECK(at::allclose(world[0].rpc_sync<at::Tensor>("worker1", "aten::sum", a, std::vector<int64_t>{1}), a.sum(1)));
  auto parts = world[0].rpc_sync<std::vector<at::Tensor>>("worker1", "aten::split", a, 1);
  CHECK(parts.size() == 3);

  auto unknown = error_of<LookupError>([&] { world[0].rpc_sync<at::Tensor>("worker1", "aten::no_such_op", a); });
  CHECK(contains(unknown, "worker1"));
  CHECK(contains(unknown, "unknown builtin operator 'aten::no_such_op'"));
  auto wrong = error_of<TypeError>([&] { world[0].rpc_sync<at::Tensor>("worker1", "aten::matmul", a, "x"); });
  CHECK(contains(wrong, "no overload of 'aten::matmul' takes (Tensor, string)"));
}

TEST_CASE("nested calls 5 deep across 3 workers, and calls back to the caller") {
  LocalWorld world(3);
  std::vector<std::string> route{"worker2", "worker0", "worker1", "worker2"};
  auto out = world[0].rpc_sync<at::Tensor>("worker1", "chain", route, at::zeros({2}));
  CHECK(at::equal(out, at::full({2}, 5.0)));
  CHECK(world[0].rpc_sync<int64_t>("worker1", "call_back", "worker0", 20) == 42);
  CHECK(world[2].rpc_sync<int64_t>("worker2", "call_back", "worker2", 1) == 4);  // self, nested
}

TEST_CASE("tensors above the frame limit travel in chunks, both ways") {
  LocalWorld world(2, [](WorkerOptions& o) { o.max_message_bytes = 1000; });
  auto big = at::rand({100, 30});  // 12,000 bytes: 12 chunks
  auto small = at::rand({5});
  auto out = world[0].rpc_sync<at::Tensor>("worker1", "my_add", big, big);
  CHECK(at::allclose(out, big * 2));
  auto strided = at::rand({60, 50}).t();  // non-contiguous, chunked
  CHECK(at::equal(world[0].rpc_sync<at::Tensor>("worker1", "identity", strided), strided));
  CHECK(at::equal(world[1].rpc_sync<at::Tensor>("worker0", "identity", small), small));
  auto many = world[0].rpc_sync<std::vector<at::Tensor>>("worker1", "aten::split", big, 50);
  REQUIRE(many.size() == 2);
  CHECK(at::equal(many[1], big.narrow(0, 50, 50)));
}

TEST_CASE("a tensor above 2 GiB (BASP's 32-bit frame length) crosses and comes back") {
  LocalWorld world(2, [](WorkerOptions& o) { o.max_message_bytes = size_t(64) << 20; });
  auto huge = at::empty({int64_t(2200) * 1024 * 1024}, at::kByte);
  huge.fill_(7);
  huge[12345] = 3;
  // Through BASP in 64 MiB chunks this takes ~45 s on 2 idle cores; a busy
  // CI machine may need several times that.
  auto back = bounded(milliseconds(240000), "2.2 GB echo", [&] {
    return world[0].rpc_sync<at::Tensor>("worker1", "identity", huge, Timeout{milliseconds(230000)});
  });
  CHECK(back.numel() == huge.numel());
  CHECK(back[12345].item<uint8_t>() == 3);
  CHECK(back[int64_t(2200) * 1024 * 1024 - 1].item<uint8_t>() == 7);
}

TEST_CASE("1,000 concurrent async calls all complete with their own results") {
  LocalWorld world(2);
  std::vector<Future<int64_t>> fs;
  for (int64_t i = 0; i < 1000; ++i) fs.push_back(world[0].rpc_async<int64_t>("worker1", "add_ints", i, i));
  auto values = bounded(milliseconds(60000), "1000 async calls", [&] { return wait_all(fs); });
  REQUIRE(values.size() == 1000);
  for (int64_t i = 0; i < 1000; ++i) CHECK(values[size_t(i)] == 2 * i);
}

TEST_CASE("errors name the worker and the cause") {
  LocalWorld world(2);
  auto remote = error_of<RemoteError>([&] { world[0].rpc_sync<int64_t>("worker1", "fail", "boom"); });
  CHECK(remote == "worker worker1: function 'fail' raised: boom");

  auto no_worker = error_of<LookupError>([&] { world[0].rpc_sync<int64_t>("nobody", "add_ints", 1, 2); });
  CHECK(contains(no_worker, "unknown worker 'nobody'"));
  CHECK(contains(no_worker, "known: worker0, worker1"));

  auto no_fn = error_of<LookupError>([&] { world[0].rpc_sync<int64_t>("worker1", "no_such_fn"); });
  CHECK(no_fn == "worker worker1: unknown function 'no_such_fn'");

  auto arity = error_of<TypeError>([&] { world[0].rpc_sync<int64_t>("worker1", "add_ints", 1); });
  CHECK(arity == "worker worker1: function 'add_ints' takes 2 arguments (int64, int64), got 1");

  auto type = error_of<TypeError>([&] { world[0].rpc_sync<at::Tensor>("worker1", "my_add", at::ones(1), "x"); });
  CHECK(type == "worker worker1: function 'my_add' argument 2: expected Tensor, got string");

  auto result = error_of<TypeError>([&] { world[0].rpc_sync<std::string>("worker1", "add_ints", 1, 2); });
  CHECK(contains(result, "function 'add_ints' on worker worker1 returned int64, expected string"));

  auto unsendable = error_of<TypeError>([&] { world[0].rpc_sync<at::Tensor>("worker1", "identity", at::Tensor()); });
  CHECK(contains(unsendable, "argument 1 of 'identity' cannot be sent"));

  // The Future carries the same error without throwing until asked.
  auto f = world[0].rpc_async<int64_t>("worker1", "fail", "later");
  bounded(milliseconds(10000), "failing future", [&] {
    try {
      f.wait();
    } catch (...) {
    }
  });
  REQUIRE(f.error().has_value());
  CHECK(f.error()->kind() == ErrorKind::Remote);
  CHECK(f.error()->worker() == "worker1");
}

TEST_CASE("a peer can run nothing but registered functions, methods and ATen operators") {
  LocalWorld world(2);
  // Names of code that exists in the callee's process but was never
  // registered: libc, JIT namespaces other than aten::, paths, empty names.
  for (const std::string name : {"system", "std::system", "libc.so.6:system", "prim::Print",
                                 "profiler::_record_function_enter", "c10d::broadcast", "/bin/sh", "",
                                 "castor::Worker::shutdown", "aten::no_such_op"}) {
    INFO(name);
    auto err = error_of<LookupError>([&] { world[0].rpc_sync<int64_t>("worker1", name, "rm -rf /"); });
    CHECK(err.rfind("worker worker1: ", 0) == 0);
    CHECK(contains(err, "'" + name + "'"));
  }
  // ATen operators that would touch the callee's file system are refused by name.
  auto path = "/tmp/castor-test-save-" + std::to_string(::getpid());
  CHECK(error_of<LookupError>([&] { world[0].rpc_sync<int64_t>("worker1", "aten::save", at::ones({1}), path); }) ==
        "worker worker1: 'aten::save' cannot be called remotely: it reads or writes files on the callee's machine, "
        "which peers may not do");
  CHECK(contains(error_of<LookupError>([&] {
                   world[0].rpc_sync<at::Tensor>("worker1", "aten::from_file", "/etc/passwd");
                 }),
                 "'aten::from_file' cannot be called remotely"));
  CHECK_FALSE(std::ifstream(path).good());
  // ... and the worker keeps serving.
  CHECK(world[0].rpc_sync<int64_t>("worker1", "add_ints", 2, 3) == 5);
}

TEST_CASE("a call past its timeout fails naming function, worker and limit -- the late reply is dropped") {
  LocalWorld world(2);
  auto start = std::chrono::steady_clock::now();
  auto msg = error_of<TimeoutError>(
      [&] { world[0].rpc_sync<int64_t>("worker1", "sleep_ms", 4000, Timeout{milliseconds(200)}); });
  auto took = std::chrono::steady_clock::now() - start;
  CHECK(msg == "call to 'sleep_ms' on worker worker1 timed out after 200 ms");
  CHECK(took < milliseconds(3000));  // long before the reply: the timeout ended the wait
  // The worker keeps working, and the late reply of the first call is ignored.
  CHECK(world[0].rpc_sync<int64_t>("worker1", "sleep_ms", 1500) == 1500);
  CHECK(world[0].rpc_sync<int64_t>("worker1", "add_ints", 1, 1) == 2);

  WorkerOptions o = test::local_options(0, 1, 0);
  // A default timeout from the options applies to every call.
  LocalWorld short_world(2, [](WorkerOptions& w) { w.rpc_timeout = milliseconds(150); });
  CHECK(contains(error_of<TimeoutError>([&] { short_world[0].rpc_sync<int64_t>("worker1", "sleep_ms", 800); }),
                 "timed out after 150 ms"));
}

TEST_CASE("functions returning a Future run asynchronously -- their errors travel") {
  LocalWorld world(2);
  CHECK(world[0].rpc_sync<int64_t>("worker1", "async_add_remote", "worker0", 2, 3) == 50);
  CHECK(world[0].rpc_sync<int64_t>("worker1", "delayed_value", 50, 7) == 7);
  auto msg = error_of<RemoteError>([&] { world[0].rpc_sync<int64_t>("worker1", "async_fail"); });
  CHECK(msg == "worker worker1: function 'async_fail' failed: async failure");
  // Many async functions in flight hold no executor threads.
  std::vector<Future<int64_t>> fs;
  for (int i = 0; i < 64; ++i) fs.push_back(world[0].rpc_async<int64_t>("worker1", "delayed_value", 200, int64_t(i)));
  auto vals = bounded(milliseconds(20000), "64 async functions", [&] { return wait_all(fs); });
  CHECK(vals[63] == 63);
}

TEST_CASE("blocked executor threads do not count against the pool -- past the bound calls fail clearly") {
  LocalWorld world(2, [](WorkerOptions& o) {
    o.num_worker_threads = 1;
    o.max_worker_threads = 6;
  });
  // One pool thread on worker1 blocks in fan_out while its own nested calls run.
  auto total = bounded(milliseconds(30000), "fan-in", [&] {
    return world[0].rpc_sync<int64_t>("worker1", "fan_out", "worker1", 4, 50);
  });
  CHECK(total == 200);
  // A self-recursive chain deeper than the bound: refused with the reason.
  std::vector<std::string> route(10, "worker1");
  auto msg = error_of<RemoteError>([&] { world[0].rpc_sync<at::Tensor>("worker1", "chain", route, at::zeros(1)); });
  CHECK(contains(msg, "executor threads are blocked in nested calls"));
  CHECK(contains(msg, "max_worker_threads = 6"));
}

TEST_CASE("then, wait_all, collect_all and timed waits") {
  LocalWorld world(2);
  auto f = world[0].rpc_async<int64_t>("worker1", "add_ints", 1, 2)
               .then([](int64_t v) { return v * 2; })
               .then([](Future<int64_t>& prev) { return std::to_string(prev.wait()); });
  CHECK(f.wait(milliseconds(10000)) == "6");
  // then() may itself make calls (it runs on an executor thread).
  Worker& w0 = world[0];
  auto g = w0.rpc_async<int64_t>("worker1", "add_ints", 1, 1).then([&w0](int64_t v) {
    return w0.rpc_sync<int64_t>("worker1", "add_ints", v, int64_t(100));
  });
  CHECK(g.wait(milliseconds(10000)) == 102);
  // A then() returning a Future is flattened.
  auto h = w0.rpc_async<int64_t>("worker1", "add_ints", 1, 1).then([&w0](int64_t v) {
    return w0.rpc_async<int64_t>("worker1", "add_ints", v, int64_t(1));
  });
  CHECK(h.wait(milliseconds(10000)) == 3);

  std::vector<Future<int64_t>> fs{w0.rpc_async<int64_t>("worker1", "add_ints", 1, 1),
                                  w0.rpc_async<int64_t>("worker1", "fail", "first"),
                                  w0.rpc_async<int64_t>("worker1", "fail", "second")};
  auto first = error_of<RemoteError>([&] { wait_all(fs); });
  CHECK((contains(first, "first") || contains(first, "second")));  // whichever failure arrived first
  auto all = collect_all(fs).wait(milliseconds(10000));
  CHECK(all.size() == 3);
  CHECK(all[0].value() == 2);
  CHECK(all[2].error().has_value());

  auto slow = w0.rpc_async<int64_t>("worker1", "sleep_ms", 500);
  CHECK(contains(error_of<TimeoutError>([&] { slow.wait(milliseconds(20)); }), "timed out after 20 ms"));
  CHECK(slow.wait(milliseconds(10000)) == 500);
}

TEST_CASE("wait_all leaves at the first error to arrive, while a slow call still runs") {
  // Like torch.futures.wait_all: a failure is not hidden behind a call that
  // is still running. The slow call waits at a gate the test opens only
  // after wait_all has thrown, so no clock decides the order.
  LocalWorld world(2);
  auto& gate = castor::test::gate("wait_all_slow");
  gate.reset();
  castor::test::OpenOnExit open_later{gate};
  std::vector<Future<at::Tensor>> fs{world[0].rpc_async<at::Tensor>("worker1", "gated_value", "wait_all_slow", at::ones({2})),
                                     world[0].rpc_async<at::Tensor>("worker1", "explode_now", at::ones({2}))};
  REQUIRE(gate.wait_arrived(1, milliseconds(20000)));
  auto error = bounded(milliseconds(20000), "wait_all with a failed call", [&] { return error_of([&] { wait_all(fs); }); });
  CHECK(contains(error, "worker worker1"));
  CHECK(contains(error, "explode_now"));
  CHECK_FALSE(fs[0].is_done());  // it still waits at the gate
  gate.open();
  CHECK(at::equal(fs[0].wait(milliseconds(20000)), at::ones({2})));
  // Without a failure it waits for every future and returns the values in order.
  std::vector<Future<int64_t>> ok{world[0].rpc_async<int64_t>("worker1", "add_ints", 1, 2),
                                  world[0].rpc_async<int64_t>("worker1", "add_ints", 3, 4)};
  CHECK((wait_all(ok) == std::vector<int64_t>{3, 7}));
}

TEST_CASE("worker info by name and id") {
  LocalWorld world(3);
  CHECK((world[1].get_worker_info() == WorkerInfo{"worker1", 1}));
  CHECK(world[0].get_worker_info("worker2").id == 2);
  CHECK(world[0].get_worker_info(int64_t(1)).name == "worker1");
  CHECK(world[0].get_worker_infos().size() == 3);
  CHECK_THROWS_AS(world[0].get_worker_info("nobody"), LookupError);
  CHECK_THROWS_AS(world[0].get_worker_info(int64_t(7)), LookupError);
}

TEST_CASE("graceful shutdown waits for running calls and the calls they started") {
  auto before = test::finished_slow_calls.load();
  {
    LocalWorld world(3);
    // worker1 starts a call to worker2 that nobody waits for.
    CHECK(world[0].rpc_sync<bool>("worker1", "spawn_background", "worker2", 400));
    // A dropped Future: fire-and-forget.
    world[0].rpc_async<int64_t>("worker2", "sleep_ms", 300);
    world.shutdown_all();
    CHECK(test::finished_slow_calls.load() - before == 2);
    CHECK(world[0].is_shut_down());
    auto after = error_of<ShutdownError>([&] { world[0].rpc_sync<int64_t>("worker1", "add_ints", 1, 1); });
    CHECK(contains(after, "worker worker0 is shut down"));
  }
}

TEST_CASE("init_rpc refuses duplicates and names the ranks that never joined") {
  {
    LocalWorld world(2);
    auto dup = test::local_options(1, 2, world.master_port());
    dup.name = "impostor";
    auto rank_taken = error_of<LookupError>([&] { init_rpc(dup); });
    CHECK(contains(rank_taken, "init_rpc(impostor): worker 'impostor' (rank 1): rank 1 is already taken by worker 'worker1'"));
  }

  // Rank 0 alone: nobody else ever comes, it names both other ranks.
  {
    auto alone = test::local_options(0, 3, test::free_port());
    alone.init_timeout = milliseconds(1000);
    auto e0 = bounded(milliseconds(20000), "init timeout", [&] { return error_of<TimeoutError>([&] { init_rpc(alone); }); });
    CHECK(contains(e0, "timed out waiting for ranks 1, 2 to join (world_size 3)"));
  }

  // Rank 1 gives up while rank 0 (the rendezvous) waits on: ranks 0 and 1
  // have joined by then, so it names rank 2 only. rank 0 waits 60 s, far
  // longer than rank 1's 3 s; it is seen to answer joins (an incompatible
  // joiner is refused at once) before rank 1 starts, so rank 1's wait is all
  // spent joined, not dialing. No clock decides whom the message names.
  auto port = test::free_port();
  auto o0 = test::local_options(0, 3, port);
  o0.init_timeout = std::chrono::seconds(60);
  auto f0 = std::async(std::launch::async, [o0] { return init_rpc(o0); });
  auto stranger = test::local_options(3, 4, port);
  auto refused = bounded(milliseconds(40000), "a refused join", [&] { return error_of<LookupError>([&] { init_rpc(stranger); }); });
  REQUIRE(contains(refused, "worker 'worker3' (rank 3) expects world_size 4, rank 0 expects 3"));
  auto o1 = test::local_options(1, 3, port);
  o1.init_timeout = milliseconds(3000);
  auto e1 = bounded(milliseconds(20000), "init timeout", [&] { return error_of<TimeoutError>([&] { init_rpc(o1); }); });
  CHECK(contains(e1, "timed out waiting for ranks 2 to join (world_size 3)"));
  // Rank 1's slot is free again: a new rank 1 and a rank 2 complete the world.
  auto f1 = std::async(std::launch::async, [port] { return init_rpc(test::local_options(1, 3, port)); });
  auto f2 = std::async(std::launch::async, [port] { return init_rpc(test::local_options(2, 3, port)); });
  for (auto* f : {&f1, &f2, &f0}) REQUIRE(f->wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  std::vector<Worker> world;
  world.push_back(f1.get());  // a rank 1 refused ("already taken") throws here, naming why
  world.push_back(f2.get());
  world.push_back(f0.get());
  CHECK(world[2].rpc_sync<std::string>("worker2", "whoami") == "worker2");
  std::vector<std::future<void>> downs;
  for (auto& w : world) downs.push_back(std::async(std::launch::async, [&w] { w.shutdown(); }));
  for (auto& d : downs) REQUIRE(d.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
}

TEST_CASE("options come from MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE when unset") {
  auto port = test::free_port();
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "1", 1);
  WorkerOptions o;
  o.init_timeout = milliseconds(10000);
  auto w = init_rpc(o);
  ::unsetenv("MASTER_ADDR");
  ::unsetenv("MASTER_PORT");
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  CHECK(w.name() == "worker0");
  CHECK(w.world_size() == 1);
  CHECK(w.rpc_sync<int64_t>("worker0", "add_ints", 2, 2) == 4);
  w.shutdown();
  auto bad = error_of<LookupError>([] {
    WorkerOptions none;
    init_rpc(none);
  });
  CHECK(contains(bad, "world_size is not set"));
}

TEST_CASE("a peer process killed mid-call fails the call within 5 s -- new calls fail at once") {
  auto port = test::free_port();
  test::ChildWorker child(1, 2, port);
  auto w0 = init_rpc(test::local_options(0, 2, port));
  auto pending = w0.rpc_async<int64_t>("worker1", "sleep_ms", 30000);
  CHECK(w0.rpc_sync<int64_t>("worker1", "add_ints", 1, 2) == 3);
  child.kill();
  auto start = std::chrono::steady_clock::now();
  auto msg = bounded(milliseconds(10000), "dead peer", [&] { return error_of<UnreachableError>([&] { pending.wait(); }); });
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK(contains(msg, "worker worker1 is unreachable"));
  auto again = error_of<UnreachableError>([&] { w0.rpc_sync<int64_t>("worker1", "add_ints", 1, 2); });
  CHECK(contains(again, "worker worker1 is unreachable"));
  // A graceful shutdown cannot complete with a dead peer: it ends with an error.
  auto stop = bounded(milliseconds(10000), "shutdown with dead peer",
                      [&] { return error_of<UnreachableError>([&] { w0.shutdown(); }); });
  CHECK(contains(stop, "graceful shutdown of worker0 failed: worker worker1 is unreachable"));
}

namespace {
}  // namespace

// Note [Hostile input] (H2, H3): a peer sends worker1 a request whose content
// does not decode there (a list nested past the cap of 64) and a message of a
// type workers do not handle. Both are logged naming the peer and dropped;
// the request is answered with the reason at once; worker1 keeps serving.
TEST_CASE("a malformed or unknown message from a peer is dropped, logged naming the peer -- the worker keeps serving") {
  LocalWorld world(2);
  castor::test::CapturedOutput log(2);
  CallRequest req;
  req.id = castor::testing::runtime(world[0]).call_ids.next();
  req.caller = 0;
  req.function = "identity";
  Value deep(int64_t(1));
  for (int i = 0; i < 70; ++i) deep = Value(Value::List{deep});
  req.args = {deep};
  // worker0 sends it through its own call path (so its reply completes the
  // call), and a message workers do not handle as its worker actor.
  auto answer = std::make_shared<std::promise<castor::detail::Outcome>>();
  auto got = answer->get_future();
  auto& rt0 = castor::testing::runtime(world[0]);
  rt0.start_call(1, CallRequest(req), std::chrono::seconds(10), [answer](castor::detail::Outcome o) { answer->set_value(std::move(o)); });
  caf::send_as(caf::actor_cast<caf::actor>(rt0.actor), caf::actor_cast<caf::actor>(*rt0.world().peer(1)),
               std::string("not a castor message"), int64_t(42));
  REQUIRE(got.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  auto reply = got.get();
  CHECK_FALSE(reply.ok);
  CHECK(contains(reply.error.message, "could not decode a call request from worker worker0"));
  CHECK(contains(reply.error.message, "values nested deeper than 64"));
  CHECK(log.wait_for("castor[worker1]: dropped a malformed castor::CallRequest from worker worker0: "
                     "values nested deeper than 64"));
  CHECK(log.wait_for("castor[worker1]: dropped an unexpected message from worker worker0: "));
  CHECK(log.text().find("not a castor message") != std::string::npos);
  // worker1 keeps serving, both ways.
  CHECK(world[0].rpc_sync<int64_t>("worker1", "add_ints", 40, 2) == 42);
  CHECK(world[1].rpc_sync<int64_t>("worker0", "add_ints", 1, 2) == 3);
  world.shutdown_all();
}
