// The functions every integration test process registers (the same set in
// the test executables and in castor_test_worker, so init_rpc's check agrees).
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include <ATen/ATen.h>

#include "actors/worker.hpp"
#include "support/test_functions.hpp"

namespace castor::test {
std::atomic<int64_t> finished_slow_calls{0};
}

using castor::Future;
using castor::Promise;
using castor::current_worker;

CASTOR_FUNCTION(my_add, [](at::Tensor a, at::Tensor b) { return a + b; });
CASTOR_FUNCTION(add_ints, [](int64_t a, int64_t b) { return a + b; });
CASTOR_FUNCTION(concat, [](std::string a, const std::string& b) { return a + b; });
CASTOR_FUNCTION(identity, [](at::Tensor t) { return t; });
CASTOR_FUNCTION(whoami, [] { return current_worker().name(); });
CASTOR_FUNCTION(fail, [](std::string message) -> int64_t { throw std::runtime_error(message); });
CASTOR_FUNCTION(noop, [] {});

CASTOR_FUNCTION(sleep_ms, [](int64_t ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  castor::test::finished_slow_calls.fetch_add(1);
  return ms;
});

// Follows `route` (worker names), adding 1 at each hop: nested calls.
CASTOR_FUNCTION(chain, [](std::vector<std::string> route, at::Tensor t) -> at::Tensor {
  if (route.empty()) return t + 1;
  auto next = route.front();
  route.erase(route.begin());
  return current_worker().rpc_sync<at::Tensor>(next, "chain", route, t + 1);
});

// Calls back into `caller` while the caller waits for this call.
CASTOR_FUNCTION(call_back, [](std::string caller, int64_t x) {
  return current_worker().rpc_sync<int64_t>(caller, "add_ints", x, int64_t(1)) * 2;
});

// Asynchronous: returns a Future, holds no executor thread while waiting.
CASTOR_FUNCTION(async_add_remote, [](std::string peer, int64_t a, int64_t b) -> Future<int64_t> {
  return current_worker().rpc_async<int64_t>(peer, "add_ints", a, b).then([](int64_t v) { return v * 10; });
});

// Completes from another thread after `ms`: a Promise the function fulfils later.
CASTOR_FUNCTION(delayed_value, [](int64_t ms, int64_t v) -> Future<int64_t> {
  Promise<int64_t> p;
  std::thread([p, ms, v] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    p.set_value(v);
  }).detach();
  return p.future();
});

CASTOR_FUNCTION(async_fail, []() -> Future<int64_t> {
  Promise<int64_t> p;
  p.set_error("async failure");
  return p.future();
});

// Fans out `n` nested calls to `peer`'s sleep_ms and waits for all: with a
// small pool this only finishes because blocked threads do not count.
CASTOR_FUNCTION(fan_out, [](std::string peer, int64_t n, int64_t ms) {
  std::vector<Future<int64_t>> fs;
  for (int64_t i = 0; i < n; ++i) fs.push_back(current_worker().rpc_async<int64_t>(peer, "sleep_ms", ms));
  int64_t total = 0;
  for (auto v : castor::wait_all(fs)) total += v;
  return total;
});

// Starts a call to `peer` that it does not wait for: graceful shutdown must.
CASTOR_FUNCTION(spawn_background, [](std::string peer, int64_t ms) {
  current_worker().rpc_async<int64_t>(peer, "sleep_ms", ms);
  return true;
});

CASTOR_FUNCTION(finished_count, [] { return castor::test::finished_slow_calls.load(); });
