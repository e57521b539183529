// The name store refuses joiners that do not fit the world, naming why.
#include <doctest/doctest.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/cluster/name_store.hpp"
#include "messages/type_registry.hpp"

using namespace castor;

namespace {
JoinRequest joiner(const std::string& name, WorkerId rank, std::vector<std::string> sigs = {"f(Tensor) -> Tensor"}) {
  JoinRequest r;
  r.self = WorkerRecord{name, rank, "127.0.0.1", uint16_t(1000 + rank)};
  r.world_size = 3;
  r.autograd_mode = "smart";
  r.signatures = std::move(sigs);
  r.timeout_ms = 5000;
  return r;
}

struct Fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  castor::detail::name_store_actor store;
  Fixture() {
    castor::detail::register_message_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    store = castor::detail::spawn_name_store(*sys, joiner("worker0", 0));
  }
  ~Fixture() { caf::anon_send_exit(store, caf::exit_reason::user_shutdown); }

  // Joins and returns the refusal text ("" if the join is pending/accepted).
  std::string refusal(JoinRequest req) {
    caf::scoped_actor self{*sys};
    std::string out = "<no answer>";
    self->request(store, std::chrono::milliseconds(300), join_atom::value, std::move(req))
        .receive([&](JoinReply& r) { out = r.ok ? "" : r.error; }, [&](caf::error&) { out = ""; });
    return out;
  }
};
}  // namespace

TEST_CASE("joiners that do not fit the world are refused with the reason") {
  Fixture fx;
  CHECK(fx.refusal(joiner("worker1", 1)).empty());  // pending: the world is not complete
  CHECK(fx.refusal(joiner("other", 1)) ==
        "worker 'other' (rank 1): rank 1 is already taken by worker 'worker1' at 127.0.0.1:1001");
  CHECK(fx.refusal(joiner("worker1", 2)) == "worker 'worker1' (rank 2): the name 'worker1' is already taken by rank 1");
  CHECK(fx.refusal(joiner("w", 7)) == "worker 'w' (rank 7): rank out of range [0, 3)");
  auto wrong_world = joiner("w2", 2);
  wrong_world.world_size = 4;
  CHECK(fx.refusal(wrong_world) == "worker 'w2' (rank 2) expects world_size 4, rank 0 expects 3");
  auto old = joiner("w2", 2);
  old.wire_version = 0;
  CHECK(fx.refusal(old).find("wire protocol version 0") != std::string::npos);
  auto fast = joiner("w2", 2);
  fast.autograd_mode = "fast";
  CHECK(fx.refusal(fast) ==
        "worker 'w2' (rank 2) uses autograd mode 'fast', rank 0 uses 'smart' (all workers must use the same mode)");
  auto other_fns = joiner("w2", 2, {"f(Tensor) -> Tensor", "g(int64) -> int64"});
  auto diff = fx.refusal(other_fns);
  CHECK(diff.find("registered different functions or classes than rank 0") != std::string::npos);
  CHECK(diff.find("only on the joiner: g(int64) -> int64") != std::string::npos);
  auto missing = joiner("w2", 2, {});
  CHECK(fx.refusal(missing).find("only on rank 0: f(Tensor) -> Tensor") != std::string::npos);
}
