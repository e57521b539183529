// Note [Actors run where their messages arrive]: a delivery from a thread of
// castor's own runs the actor it wakes on that thread, one actor after
// another; CAF's own threads leave it to CAF's scheduler.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <c10/core/GradMode.h>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/logger.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/api/worker_options.hpp"
#include "actors/calls/thread_context.hpp"
#include "actors/hooks/arrival_runner.hpp"
#include "actors/hooks/thread_autograd_context.hpp"
#include "actors/transport/caf_config.hpp"

using castor::detail::deliver_here;

namespace {

using probe_actor = caf::typed_actor<caf::reacts_to<int>>;

struct Seen {
  std::string what;
  std::thread::id thread;
  bool on_caf_thread = false;
};

struct Log {
  std::mutex mtx;
  std::vector<Seen> seen;
  void add(std::string what) {
    std::lock_guard<std::mutex> lock(mtx);
    seen.push_back({std::move(what), std::this_thread::get_id(), castor::detail::on_caf_thread()});
  }
  std::vector<Seen> take() {
    std::lock_guard<std::mutex> lock(mtx);
    return seen;
  }
};

// Logs each message; passes it on to `next` (if any), then logs its return.
probe_actor::behavior_type relay(probe_actor::pointer self, Log* log, std::string name, probe_actor next) {
  return {[=](int n) {
    log->add(name + " got " + std::to_string(n));
    if (next) self->send(next, n);
    log->add(name + " returns");
  }};
}

// Spawns a relay on its first message and passes the message to it.
probe_actor::behavior_type spawner(probe_actor::pointer self, Log* log) {
  return {[=](int n) {
    auto child = self->spawn(relay, log, std::string("child"), probe_actor{});
    self->send(child, n);
  }};
}

struct System {
  std::unique_ptr<caf::actor_system_config> cfg = castor::detail::make_caf_config(castor::WorkerOptions{});
  caf::actor_system sys{*cfg};
};

// Waits (bounded) until `log` holds `count` entries.
std::vector<Seen> wait_for(Log& log, size_t count) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    auto seen = log.take();
    if (seen.size() >= count) return seen;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  FAIL("the actors logged " << log.take().size() << " entries in 10 s, not " << count);
  return {};
}

}  // namespace

TEST_CASE("a delivery from castor's own thread runs the woken actors there, one after another (D1, D2)") {
  System s;
  Log log;
  auto b = s.sys.spawn<caf::lazy_init>(relay, &log, std::string("b"), probe_actor{});
  auto a = s.sys.spawn<caf::lazy_init>(relay, &log, std::string("a"), b);
  deliver_here(s.sys, a, 1);
  // Everything ran before deliver_here returned, on this thread, and b only
  // once a had returned.
  auto seen = log.take();
  REQUIRE(seen.size() == 4);
  CHECK(seen[0].what == "a got 1");
  CHECK(seen[1].what == "a returns");
  CHECK(seen[2].what == "b got 1");
  CHECK(seen[3].what == "b returns");
  for (const auto& e : seen) {
    CHECK(e.thread == std::this_thread::get_id());
    CHECK_FALSE(e.on_caf_thread);
  }
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(b, caf::exit_reason::user_shutdown);
}

TEST_CASE("a delivery from one of CAF's threads is left to CAF's scheduler (D4)") {
  System s;
  Log log;
  auto a = s.sys.spawn<caf::lazy_init>(relay, &log, std::string("a"), probe_actor{});
  s.sys.spawn([&s, a](caf::event_based_actor*) { deliver_here(s.sys, a, 2); });
  auto seen = wait_for(log, 2);
  CHECK(seen[0].what == "a got 2");
  CHECK(seen[0].on_caf_thread);
  CHECK(seen[0].thread != std::this_thread::get_id());
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

TEST_CASE("an actor spawned during a delivery runs on the same thread, and CAF's logger is let go (D2, D5)") {
  System s;
  Log log;
  auto a = s.sys.spawn<caf::lazy_init>(spawner, &log);
  deliver_here(s.sys, a, 3);
  auto seen = log.take();
  REQUIRE(seen.size() == 2);
  CHECK(seen[0].what == "child got 3");
  CHECK(seen[0].thread == std::this_thread::get_id());
  // The spawn set CAF's logger in this thread's locals; the actor system's
  // end would wait for that reference forever.
  CHECK(caf::logger::current_logger() == nullptr);
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

TEST_CASE("two threads delivering to one actor: never run twice at once, each sender's order kept (D1)") {
  System s;
  struct Counts {
    std::atomic<int> running{0};
    std::atomic<bool> overlapped{false};
    std::mutex mtx;
    std::vector<int> last{-1, -1};
    bool out_of_order = false;
    std::atomic<int> handled{0};
  } counts;
  auto a = s.sys.spawn<caf::lazy_init>([&counts](probe_actor::pointer) -> probe_actor::behavior_type {
    return {[&counts](int tagged) {
      if (counts.running.fetch_add(1) != 0) counts.overlapped = true;
      int sender = tagged % 2, n = tagged / 2;
      {
        std::lock_guard<std::mutex> lock(counts.mtx);
        if (n <= counts.last[size_t(sender)]) counts.out_of_order = true;
        counts.last[size_t(sender)] = n;
      }
      counts.running.fetch_sub(1);
      counts.handled.fetch_add(1);
    }};
  });
  constexpr int kEach = 20000;
  auto send_all = [&](int sender) {
    for (int n = 0; n < kEach; ++n) deliver_here(s.sys, a, n * 2 + sender);
  };
  auto t0 = std::async(std::launch::async, send_all, 0);
  auto t1 = std::async(std::launch::async, send_all, 1);
  REQUIRE(t0.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  REQUIRE(t1.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  CHECK(counts.handled.load() == 2 * kEach);
  CHECK_FALSE(counts.overlapped.load());
  CHECK_FALSE(counts.out_of_order);
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

// Posts `n + 100` to `other` from inside its handler (D9), then logs its return.
probe_actor::behavior_type poster(probe_actor::pointer self, Log* log, caf::actor_system* sys, probe_actor other) {
  return {[=](int n) {
    log->add("poster got " + std::to_string(n));
    castor::detail::post_here(*sys, other, n + 100);
    log->add("poster returns");
  }};
}

TEST_CASE("a post never runs the actor inside the caller's frame: behind the running job, or on CAF's threads (D9)") {
  System s;
  Log log;
  auto b = s.sys.spawn<caf::lazy_init>(relay, &log, std::string("b"), probe_actor{});
  SUBCASE("from a thread that runs no runner: CAF schedules it") {
    castor::detail::post_here(s.sys, b, 4);
    auto seen = wait_for(log, 2);
    CHECK(seen[0].what == "b got 4");
    CHECK(seen[0].on_caf_thread);
    CHECK(seen[0].thread != std::this_thread::get_id());
  }
  SUBCASE("from a handler a delivery runs: on the same thread, once that handler returned") {
    auto a = s.sys.spawn<caf::lazy_init>(poster, &log, &s.sys, b);
    deliver_here(s.sys, a, 5);
    auto seen = log.take();
    REQUIRE(seen.size() == 4);
    CHECK(seen[0].what == "poster got 5");
    CHECK(seen[1].what == "poster returns");
    CHECK(seen[2].what == "b got 105");
    for (const auto& e : seen) CHECK(e.thread == std::this_thread::get_id());
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
  caf::anon_send_exit(b, caf::exit_reason::user_shutdown);
}

TEST_CASE("a gate runs deliveries here while open, schedules them once closed, and drops them once sealed (D8)") {
  System s;
  Log log;
  castor::detail::ArrivalGate gate;
  auto a = s.sys.spawn<caf::lazy_init>(relay, &log, std::string("a"), probe_actor{});
  gate.deliver(&s.sys, a, 6);
  auto seen = log.take();
  REQUIRE(seen.size() == 2);
  CHECK(seen[0].thread == std::this_thread::get_id());
  CHECK_FALSE(gate.closed());

  gate.close_and_wait(std::chrono::seconds(1));
  CHECK(gate.closed());
  gate.deliver(&s.sys, a, 7);
  seen = wait_for(log, 4);
  CHECK(seen[2].what == "a got 7");
  CHECK(seen[2].on_caf_thread);

  gate.seal_and_wait(std::chrono::seconds(1));
  gate.close();  // a seal is never undone
  bool ran = false;
  gate.guarded([&] { ran = true; });
  gate.deliver(&s.sys, a, 8);
  gate.post(&s.sys, a, 9);
  CHECK_FALSE(ran);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // what a dropped message would need to arrive
  CHECK(log.take().size() == 4);
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

namespace {

struct AutogradState {
  bool grad_enabled = false;
  castor::ContextId context;
};

// Records the autograd state its handler runs under.
probe_actor::behavior_type state_recorder(probe_actor::pointer, std::promise<AutogradState>* seen) {
  return {[=](int) { seen->set_value({c10::GradMode::is_enabled(), castor::detail::thread_autograd_context()}); }};
}

}  // namespace

TEST_CASE("the actors a delivery runs see libtorch's default state and no autograd context, and the caller's come back after (D7)") {
  std::promise<AutogradState> seen;  // outlives the actor system, whichever thread sets it
  System s;
  auto recorded = seen.get_future();
  auto recorder = s.sys.spawn<caf::lazy_init>(state_recorder, &seen);
  castor::ContextId callers{(uint64_t{3} << 40) | 17};
  struct Restore {  // the thread's own context comes back even if a REQUIRE ends the test
    castor::ContextId previous;
    ~Restore() { castor::detail::exchange_thread_autograd_context(previous); }
  } restore{castor::detail::exchange_thread_autograd_context(callers)};
  {
    c10::NoGradGuard no_grad;
    deliver_here(s.sys, recorder, 1);
    // It ran before deliver_here returned (D1): nothing to wait for.
    REQUIRE(recorded.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
    auto inside = recorded.get();
    CHECK(inside.grad_enabled);
    CHECK_FALSE(inside.context.valid());
    // The caller's own state is back once the delivery returned.
    CHECK_FALSE(c10::GradMode::is_enabled());
    CHECK(castor::detail::thread_autograd_context() == callers);
  }
  caf::anon_send_exit(recorder, caf::exit_reason::user_shutdown);
}
