// Note [Owner recovery] (apps/common/owner_recovery.cpp) on two live
// workers of this process: which errors are taken as a watched worker's
// death and rebuilt after, and which are the app's own and rethrown, with
// their message, and with `rebuild` never run. The deaths themselves (real
// workers SIGKILLed and rejoining) are tests/apps/test_restarts.cpp's.
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <stdexcept>

#include "actors/api/errors.hpp"
#include "actors/api/worker.hpp"
#include "actors/transport/sockets.hpp"
#include "apps/common/owner_recovery.hpp"
#include "apps/in_process_workers.hpp"

using castor::ErrorInfo;
using castor::ErrorKind;
using castor::apps::OwnerRecovery;
using castor::test::in_process;
using Clock = std::chrono::steady_clock;

TEST_CASE("owner recovery: a watched worker's death is rebuilt after, and the app's own errors are rethrown as they were") {
  auto port = castor::detail::net::free_local_port();
  auto second = std::async(std::launch::async, [port] { return castor::init_rpc(in_process(1, port)); });
  auto driver = castor::init_rpc(in_process(0, port));
  auto watched = second.get();
  int rebuilt = 0;
  auto rebuild = [&] { ++rebuilt; };
  auto always = [] { return true; };
  auto unreachable = [](const std::string& who) {
    return castor::UnreachableError(ErrorInfo{ErrorKind::Unreachable, who, "worker " + who + " is unreachable"});
  };
  {
    OwnerRecovery recovery(driver, {1}, true, std::chrono::seconds(5), "test", "worker1");

    // An attempt that runs through.
    CHECK(recovery.run([] {}, always, rebuild));
    CHECK(rebuilt == 0);

    // OR1: an Unreachable error naming the watched worker is its death; it
    // is alive again (here: it never died), so rebuild runs at once.
    CHECK_FALSE(recovery.run([&] { throw unreachable("worker1"); }, always, rebuild));
    CHECK(rebuilt == 1);

    // Nothing to rebuild from: the death is rethrown, rebuild never runs.
    CHECK_THROWS_WITH_AS(recovery.run([&] { throw unreachable("worker1"); }, [] { return false; }, rebuild),
                         "worker worker1 is unreachable", castor::UnreachableError);
    CHECK(rebuilt == 1);

    // The user's code threw: no death shows within OR1's 2 s, so the error
    // is the app's, rethrown as it was.
    auto start = Clock::now();
    CHECK_THROWS_WITH_AS(recovery.run([] { throw castor::RemoteError(ErrorInfo{ErrorKind::Remote, "worker1", "boom"}); },
                                      always, rebuild),
                         "boom", castor::RemoteError);
    CHECK(Clock::now() - start >= std::chrono::seconds(2));
    CHECK(Clock::now() - start < std::chrono::seconds(30));
    // So is an Unreachable error about a worker not watched.
    CHECK_THROWS_AS(recovery.run([&] { throw unreachable("worker0"); }, always, rebuild), castor::UnreachableError);
    // And anything that is not an RpcError, at once.
    CHECK_THROWS_WITH_AS(recovery.run([] { throw std::logic_error("a bug of the app's"); }, always, rebuild),
                         "a bug of the app's", std::logic_error);
    CHECK(rebuilt == 1);

    // OR3: a rebuild that fails for the app's own reason fails the run.
    CHECK_THROWS_WITH_AS(
        recovery.run([&] { throw unreachable("worker1"); }, always,
                     [] { throw castor::RemoteError(ErrorInfo{ErrorKind::Remote, "worker1", "the constructor threw"}); }),
        "the constructor threw", castor::RemoteError);
  }
  {
    // Without a restart policy nothing is taken back.
    OwnerRecovery off(driver, {1}, false, std::chrono::seconds(5), "test", "worker1");
    CHECK_THROWS_AS(off.run([&] { throw unreachable("worker1"); }, always, rebuild), castor::UnreachableError);
    CHECK(rebuilt == 1);
  }
  auto stopping = std::async(std::launch::async, [&watched] { watched.shutdown(); });
  driver.shutdown();
  REQUIRE(stopping.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  stopping.get();
}
