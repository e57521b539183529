// Meshes (Note [Mesh] in rref/mesh.hpp) between real workers: results in
// member order, broadcasts seen by later calls, backward through every
// member, a member whose code throws, one SIGKILLed, and a world that ends
// with broadcasts still running.
#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "engine/context.hpp"
#include "rref/mesh.hpp"
#include "support/cluster.hpp"
#include "support/errors.hpp"
#include "support/mesh_classes.hpp"
#include "support/test_functions.hpp"

using namespace castor;
using castor::test::contains;
using castor::test::error_of;
using castor::test::LocalWorld;
using std::chrono::milliseconds;

TEST_CASE("a mesh: one object per worker, results in member order, call_one, workers by name or rank") {
  LocalWorld world(3);
  auto& w = world[0];
  Mesh<Counter> by_name = w.spawn_mesh<Counter>(std::vector<std::string>{"worker2", "worker1"}, int64_t(10));
  REQUIRE(by_name.size() == 2);
  CHECK((by_name.workers() == std::vector<WorkerInfo>{{"worker2", 2}, {"worker1", 1}}));
  CHECK((by_name.call(&Counter::add, 5).wait() == std::vector<int64_t>{15, 15}));
  CHECK(by_name.call_one(1, &Counter::add, 1).wait() == 16);
  CHECK((by_name.call(&Counter::get).wait() == std::vector<int64_t>{15, 16}));

  auto by_rank = w.spawn_mesh<Scaler>({0, 1, 2}, 1.0);  // ranks, and this worker too
  CHECK((by_rank.call(&Scaler::factor).wait() == std::vector<double>{1.0, 2.0, 3.0}));
  CHECK(by_rank.member(2).owner_name() == "worker2");
  CHECK(contains(error_of<LookupError>([&] { by_rank.call_one(3, &Scaler::factor); }),
                 "mesh member 3 does not exist: the mesh has 3 member(s)"));
}

TEST_CASE("a mesh broadcast: no results, and a later call through the mesh sees its effect on every member") {
  LocalWorld world(3);
  auto mesh = world[0].spawn_mesh<Counter>(std::vector<int>{1, 2}, int64_t(0));
  for (int i = 0; i < 20; ++i) mesh.broadcast(&Counter::add, int64_t(1));
  mesh.broadcast(&Counter::slow_add, int64_t(100), int64_t(100));  // still running when the next call leaves
  auto copy = mesh;  // copies share the order (M3)
  CHECK((copy.call(&Counter::get).wait(milliseconds(30000)) == std::vector<int64_t>{120, 120}));
}

TEST_CASE("a mesh call inside an autograd context: backward flows through every member") {
  LocalWorld world(3);
  auto& w = world[0];
  auto mesh = w.spawn_mesh<Scaler>(std::vector<int>{1, 2}, 1.0);  // factors 2 and 3
  auto x = at::ones({4}).requires_grad_(true);
  {
    autograd::Context ctx(w);
    auto outs = mesh.call(&Scaler::apply, x).wait();
    REQUIRE(outs.size() == 2);
    auto loss = (outs[0] + outs[1]).sum();
    CHECK(loss.item<double>() == 20.0);
    ctx.backward({loss});
    CHECK(at::equal(ctx.gradients().at(x), at::full({4}, 5.0)));  // 2 from worker1, 3 from worker2
    CHECK_FALSE(x.grad().defined());
  }
}

TEST_CASE("a mesh member whose code throws fails the mesh call, naming it, and the others answer") {
  LocalWorld world(3);
  auto mesh = world[0].spawn_mesh<Picky>(std::vector<std::string>{"worker1", "worker2"});
  auto err = error_of<RemoteError>([&] { mesh.call(&Picky::check, 7).wait(milliseconds(30000)); });
  CHECK(contains(err, "worker2"));
  CHECK(contains(err, "picky: worker2 refuses 7"));
  CHECK(mesh.call_one(0, &Picky::check, 8).wait() == 8);
}

TEST_CASE("a mesh member SIGKILLed: the mesh call fails with its OwnerDiedError, the survivor still answers") {
  auto port = test::free_port();
  test::ChildWorker worker1(1, 3, port), worker2(2, 3, port);
  auto w0 = init_rpc(test::local_options(0, 3, port));
  w0.on_worker_failure([](const WorkerFailure&) {});  // the app carries on without the dead (shutdown among the rest)
  auto mesh = w0.spawn_mesh<Counter>(std::vector<int>{1, 2}, int64_t(0));
  CHECK((mesh.call(&Counter::add, 1).wait(milliseconds(30000)) == std::vector<int64_t>{1, 1}));
  worker2.kill();
  auto err = error_of<OwnerDiedError>([&] { mesh.call(&Counter::get).wait(milliseconds(30000)); });
  CHECK(contains(err, "worker2"));
  CHECK(mesh.call_one(0, &Counter::add, 1).wait(milliseconds(30000)) == 2);
  mesh = Mesh<Counter>();  // released: worker1's counter goes with the last fork
  w0.shutdown();
  CHECK(worker1.wait_exit(milliseconds(30000)) == 0);
  CHECK(worker2.wait_exit(milliseconds(10000)) == 128 + SIGKILL);
}

TEST_CASE("a world that ends with mesh broadcasts still running: graceful shutdown waits for them, nothing leaks") {
  LocalWorld world(3);
  {
    auto mesh = world[0].spawn_mesh<Counter>(std::vector<int>{1, 2}, int64_t(0));
    for (int i = 0; i < 5; ++i) mesh.broadcast(&Counter::slow_add, int64_t(50), int64_t(1));
  }  // the mesh is dropped with its broadcasts in flight
  world.shutdown_all();
  CHECK_FALSE(world.leaked());
}

