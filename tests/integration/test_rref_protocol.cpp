// The RRef protocol under hostile delivery: dropped, duplicated, delayed and
// reordered control messages, dead workers, and random fork trees.
#include <doctest/doctest.h>

#include <random>
#include <thread>

#include <ATen/ATen.h>

#include "rref/rref.hpp"
#include "support/cluster.hpp"
#include "support/test_functions.hpp"

using namespace castor;
using castor::test::bounded;
using castor::test::LocalWorld;
using castor::test::eventually;
using std::chrono::milliseconds;

namespace {

bool no_owner_anywhere(LocalWorld& world) {
  for (size_t i = 0; i < world.size(); ++i) {
    auto info = world[i].rref_debug_info();
    if (info["num_owner_rrefs"] != 0 || info["num_unacked_control_messages"] != 0) return false;
  }
  return true;
}

std::string name(int r) { return "worker" + std::to_string(r); }
}  // namespace

TEST_CASE("dropped, duplicated and delayed control messages are retried and deduplicated") {
  LocalWorld world(3, [](WorkerOptions& o) {
    o.faults.seed = uint64_t(o.rank + 7);
    o.faults.rules = {
        FaultRule{"fork_request", 2, 0.0, milliseconds(0), 1.0, 0.0, milliseconds(0)},  // drop 2, then duplicate all
        FaultRule{"child_accept", 2, 0.0, milliseconds(30), 0.0, 0.0, milliseconds(0)},  // drop 2, delay the rest
        FaultRule{"user_delete", 1, 0.0, milliseconds(0), 1.0, 0.0, milliseconds(0)},   // drop 1, duplicate all
        FaultRule{"ack", 3, 0.0, milliseconds(0), 0.5, 0.0, milliseconds(0)},           // drop 3, duplicate half
    };
  });
  for (int i = 0; i < 4; ++i) {
    auto key = "k" + std::to_string(i);
    CHECK(world[0].rpc_sync<bool>("worker0", "create_held", key, "worker2", double(i)));
    CHECK(world[0].rpc_sync<bool>("worker0", "share_held", key, "worker1", key));  // user -> user
    CHECK(world[0].rpc_sync<double>("worker1", "held_value", key) == double(i));
    CHECK(world[0].rpc_sync<bool>("worker0", "drop", key));
    CHECK(world[0].rpc_sync<double>("worker1", "held_value", key) == double(i));
    CHECK(world[0].rpc_sync<bool>("worker1", "drop", key));
  }
  CHECK(eventually([&] { return no_owner_anywhere(world); }));
  world.shutdown_all();
  CHECK_FALSE(world.leaked());
}

TEST_CASE("random fork trees over 4 workers under random faults: no early delete, nothing left") {
  LocalWorld world(4, [](WorkerOptions& o) {
    o.faults.seed = uint64_t(1000 + o.rank);
    o.faults.rules = {FaultRule{"*", 0, 0.05, milliseconds(0), 0.1, 0.3, milliseconds(15)}};
  });
  const int seeds = 200;
  int fetches = 0;
  for (int seed = 1; seed <= seeds; ++seed) {
    std::mt19937 rng{uint32_t(seed)};
    auto pick = [&](int n) { return int(rng() % uint32_t(n)); };
    int owner = pick(4);
    int creator = pick(4);
    double value = seed;
    std::vector<std::pair<int, std::string>> holders;  // (worker, key) holding a live handle
    auto key0 = "s" + std::to_string(seed) + "_0";
    REQUIRE(world[0].rpc_sync<bool>(name(creator), "create_held", key0, name(owner), value));
    holders.push_back({creator, key0});
    int steps = 2 + pick(5);
    for (int s = 1; s <= steps; ++s) {
      auto [from, key] = holders[size_t(pick(int(holders.size())))];
      int to = pick(4);
      auto new_key = "s" + std::to_string(seed) + "_" + std::to_string(s);
      world[0].rpc_sync<bool>(name(from), "share_held", key, name(to), new_key);  // to itself: maybe unconfirmed yet
      holders.push_back({to, new_key});
      if (pick(2) == 0) {  // occasionally a holder drops early
        size_t i = size_t(pick(int(holders.size())));
        REQUIRE(world[0].rpc_sync<bool>(name(holders[i].first), "drop", holders[i].second));
        holders.erase(holders.begin() + long(i));
        if (holders.empty()) break;
      }
    }
    std::shuffle(holders.begin(), holders.end(), rng);
    while (!holders.empty()) {
      // Every handle still alive can fetch the value: it was not deleted early.
      auto [w, k] = holders[size_t(pick(int(holders.size())))];
      REQUIRE(world[0].rpc_sync<double>(name(w), "held_value", k) == value);
      ++fetches;
      REQUIRE(world[0].rpc_sync<bool>(name(holders.back().first), "drop", holders.back().second));
      holders.pop_back();
    }
  }
  CHECK(fetches >= seeds);
  // Nothing is left once every handle is gone.
  CHECK(eventually([&] { return no_owner_anywhere(world); }, milliseconds(60000)));
  world.shutdown_all();
  CHECK_FALSE(world.leaked());
}

TEST_CASE("an owner that dies makes to_here fail within 5 s naming it, its users' forks are forgotten") {
  auto port = test::free_port();
  test::ChildWorker child(1, 2, port);
  auto w0 = init_rpc(test::local_options(0, 2, port));
  auto on_child = w0.remote<at::Tensor>("worker1", "identity", at::ones({2}));
  CHECK(at::equal(on_child.to_here(), at::ones({2})));
  auto counter = w0.remote<Counter>("worker1", "Counter", 5);
  CHECK(counter.rpc_sync<int64_t>("add", 1) == 6);
  // The child holds a fork of a value we own.
  auto mine = w0.make_rref(at::ones({3}));
  CHECK(w0.rpc_sync<bool>("worker1", "hold", "m", mine));
  CHECK(eventually([&] { return w0.rref_debug_info().at("num_forks") == 1; }));
  child.kill();
  auto start = std::chrono::steady_clock::now();
  std::string msg;
  bounded(milliseconds(10000), "to_here on a dead owner", [&] {
    try {
      on_child.to_here();
    } catch (const OwnerDiedError& e) {  // an UnreachableError that names the RRef
      msg = e.what();
    }
  });
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK(msg.find("its owner, worker worker1, died") != std::string::npos);
  CHECK(msg.find("RRef rref") != std::string::npos);
  // A method call on an object of the dead owner fails the same way, and is
  // still an UnreachableError for code that catches those.
  std::string method_error;
  try {
    counter.rpc_sync<int64_t>("add", 1);
  } catch (const UnreachableError& e) {
    method_error = e.what();
    CHECK(dynamic_cast<const OwnerDiedError*>(&e) != nullptr);
  }
  CHECK(method_error.find("its owner, worker worker1, died") != std::string::npos);
  // The dead worker's fork counts as deleted: our value is freed with our handle.
  CHECK(eventually([&] { return w0.rref_debug_info().at("num_forks") == 0; }));
  { auto drop = std::move(mine); }
  CHECK(eventually([&] { return w0.rref_debug_info().at("num_owner_rrefs") == 0; }));
  w0.shutdown(false);
}
