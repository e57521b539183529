// The functions every integration test process registers (the same set in
// the test executables and in castor_test_worker, so init_rpc's check agrees).
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>

#include <unistd.h>

#include <ATen/ATen.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "actors/api/shared_memory.hpp"
#include "actors/api/worker.hpp"
#include "actors/runtime/testing.hpp"
#include "support/arrival_log.hpp"
#include "support/mesh_classes.hpp"
#include "support/test_functions.hpp"

namespace castor::test {
std::atomic<int64_t> finished_slow_calls{0};

void Gate::open() {
  std::lock_guard<std::mutex> lock(mtx_);
  open_ = true;
  cv_.notify_all();
}

void Gate::reset() {
  std::lock_guard<std::mutex> lock(mtx_);
  open_ = false;
  arrived_ = 0;
}

bool Gate::pass(std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(mtx_);
  ++arrived_;
  cv_.notify_all();
  return cv_.wait_for(lock, limit, [&] { return open_; });
}

bool Gate::wait_arrived(int n, std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(mtx_);
  return cv_.wait_for(lock, limit, [&] { return arrived_ >= n; });
}

int Gate::arrived() const {
  std::lock_guard<std::mutex> lock(mtx_);
  return arrived_;
}

Gate& gate(const std::string& name) {
  static std::mutex mtx;
  static std::map<std::string, std::unique_ptr<Gate>> gates;  // never freed: held calls may outlive a test
  std::lock_guard<std::mutex> lock(mtx);
  auto& g = gates[name];
  if (!g) g = std::make_unique<Gate>();
  return *g;
}
}  // namespace castor::test

using castor::Future;
using castor::Promise;
using castor::current_worker;

CASTOR_FUNCTION(my_add, [](at::Tensor a, at::Tensor b) { return a + b; });
CASTOR_FUNCTION(add_ints, [](int64_t a, int64_t b) { return a + b; });
CASTOR_FUNCTION(concat, [](std::string a, const std::string& b) { return a + b; });
CASTOR_FUNCTION(identity, [](at::Tensor t) { return t; });

// Note [Shared tensors]: what a shared argument is on arrival, and a shared
// tensor of the callee's own, kept between calls.
namespace {
at::Tensor& kept_tensor() {
  static at::Tensor t;
  return t;
}
}  // namespace
CASTOR_FUNCTION(arrived_shared, [](at::Tensor t) { return castor::is_shared(t); });
CASTOR_FUNCTION(fill_in_place, [](at::Tensor t, double v) {
  t.fill_(v);
  return t.sum().item<double>();
});
CASTOR_FUNCTION(fill_then_throw, [](at::Tensor t, double v) -> bool {
  t.fill_(v);
  throw std::runtime_error("fill_then_throw: filled " + std::to_string(t.numel()) + " elements, then failed");
});
CASTOR_FUNCTION(share_kept, [](int64_t n) {
  kept_tensor() = at::zeros({n});
  castor::share_memory(kept_tensor());
  return kept_tensor();
});
CASTOR_FUNCTION(keep_tensor, [](at::Tensor t) {
  kept_tensor() = t;
  return castor::is_shared(t);
});
CASTOR_FUNCTION(add_to_kept, [](double v) {
  kept_tensor().add_(v);
  return true;
});
CASTOR_FUNCTION(kept_sum, [] { return kept_tensor().sum().item<double>(); });
CASTOR_FUNCTION(whoami, [] { return current_worker().name(); });
CASTOR_FUNCTION(pid_of, [] { return int64_t(::getpid()); });  // which process serves a name (test_rejoin)
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

// B15 of Note [Bulk path]: the sum of the last tensor given to
// remember_sum, for a later call to read; and the worker's count of
// same-host copies it found revoked.
namespace castor::test {
std::atomic<int64_t> remembered_sum{0};
}
CASTOR_FUNCTION(remember_sum, [](at::Tensor t) {
  castor::test::remembered_sum = int64_t(t.sum().item<double>());
  return true;
});
CASTOR_FUNCTION(remembered_sum, [] { return castor::test::remembered_sum.load(); });
CASTOR_FUNCTION(copies_revoked_here,
                [] { return int64_t(castor::testing::runtime(current_worker()).stats.copies_revoked.load()); });

// -- RRefs -------------------------------------------------------------------------

#include <map>
#include <mutex>

#include "rref/rref.hpp"

using castor::RRef;

namespace castor::test {
std::mutex held_mtx;
std::map<std::string, RRef<at::Tensor>> held;  // "worker/key" -> an RRef kept between calls
std::atomic<int> counter_overlap{0};
}  // namespace castor::test

CASTOR_FUNCTION(rref_sum, [](RRef<at::Tensor> r) { return r.to_here().sum(); });
CASTOR_FUNCTION(rref_confirmed, [](RRef<at::Tensor> r) { return r.confirmed_by_owner(); });
CASTOR_FUNCTION(rref_owner, [](RRef<at::Tensor> r) { return r.owner_name(); });
CASTOR_FUNCTION(rref_is_owner, [](RRef<at::Tensor> r) { return r.is_owner(); });
CASTOR_FUNCTION(value_sum, [](at::Tensor t) { return t.sum(); });
CASTOR_FUNCTION(two_values, [](at::Tensor a, at::Tensor b) { return a + b; });
CASTOR_FUNCTION(local_value_of, [](RRef<at::Tensor> r) { return r.local_value(); });

// Creates an RRef owned by `owner` and returns it: RRef<RRef<Tensor>> with remote().
CASTOR_FUNCTION(make_remote, [](std::string owner, at::Tensor t) {
  return current_worker().remote<at::Tensor>(owner, "identity", t);
});
// Returns the RRef it got (user shares with owner as return value, when called on the owner).
CASTOR_FUNCTION(give_back, [](RRef<at::Tensor> r) { return r; });
// Forwards the RRef along `route`, then fetches it at the end.
CASTOR_FUNCTION(pass_on, [](std::vector<std::string> route, RRef<at::Tensor> r) -> at::Tensor {
  if (!r.confirmed_by_owner()) throw std::runtime_error("ran before the owner confirmed the fork");
  if (route.empty()) return r.to_here();
  auto next = route.front();
  route.erase(route.begin());
  return current_worker().rpc_sync<at::Tensor>(next, "pass_on", route, r);
});
CASTOR_FUNCTION(hold, [](std::string key, RRef<at::Tensor> r) {
  std::lock_guard<std::mutex> lock(castor::test::held_mtx);
  castor::test::held[current_worker().name() + "/" + key] = r;
  return r.confirmed_by_owner();
});
CASTOR_FUNCTION(drop, [](std::string key) {
  std::lock_guard<std::mutex> lock(castor::test::held_mtx);
  return castor::test::held.erase(current_worker().name() + "/" + key) > 0;
});
CASTOR_FUNCTION(fetch_held, [](std::string key) {
  RRef<at::Tensor> r;
  {
    std::lock_guard<std::mutex> lock(castor::test::held_mtx);
    r = castor::test::held.at(current_worker().name() + "/" + key);
  }
  return r.to_here();
});
// remote() of gated_value on `owner`, held here under `key`: its value
// does not exist until the test opens gate `gate` (test_deaths).
CASTOR_FUNCTION(hold_gated_remote, [](std::string key, std::string owner, std::string gate) {
  auto r = current_worker().remote<at::Tensor>(owner, "gated_value", gate, at::ones({2}));
  std::lock_guard<std::mutex> lock(castor::test::held_mtx);
  castor::test::held[current_worker().name() + "/" + key] = r;
  return true;
});
// remote() of rref_sum on `to` with the RRef held here under `key` as its
// argument, the result held under key + "/result" (test_deaths). rref_sum
// takes the RRef, so `to` adopts the fork (a function that took the value
// would borrow it: G3 of Note [RRef protocol]).
CASTOR_FUNCTION(remote_held_to, [](std::string key, std::string to) {
  std::lock_guard<std::mutex> lock(castor::test::held_mtx);
  auto& held = castor::test::held;
  auto name = current_worker().name() + "/" + key;
  held[name + "/result"] = current_worker().remote<at::Tensor>(to, "rref_sum", held.at(name));
  return true;
});
// Sends a held RRef to `to`, which holds it under `key`.
CASTOR_FUNCTION(share_held, [](std::string key, std::string to, std::string new_key) {
  RRef<at::Tensor> r;
  {
    std::lock_guard<std::mutex> lock(castor::test::held_mtx);
    r = castor::test::held.at(current_worker().name() + "/" + key);
  }
  return current_worker().rpc_sync<bool>(to, "hold", new_key, r);
});
CASTOR_FUNCTION(rref_debug, [] { return current_worker().rref_debug_info().at("num_owner_rrefs"); });
// Throws at once: an RRef it creates holds that error.
CASTOR_FUNCTION(explode_now, [](at::Tensor t) -> at::Tensor {
  throw std::runtime_error("explode_now: failed at once (" + std::to_string(t.numel()) + " elements)");
});

// Returns `t` once the test opens gate `name` (test::gate): the value of an
// RRef it creates does not exist until then. Fails after 30 s closed.
CASTOR_FUNCTION(gated_value, [](std::string name, at::Tensor t) {
  if (!castor::test::gate(name).pass(std::chrono::seconds(30)))
    throw std::runtime_error("gate '" + name + "' was not opened within 30 s");
  return t;
});

CASTOR_CLASS(Scaler).constructor<double>().method("apply", &Scaler::apply).method("factor", &Scaler::factor);
CASTOR_CLASS(Picky).constructor<>().method("check", &Picky::check);
CASTOR_CLASS(ArrivalLog).constructor<>().method("record", &ArrivalLog::record).method("arrivals", &ArrivalLog::arrivals);

CASTOR_CLASS(Counter)
    .constructor<int64_t>()
    .method("add", &Counter::add)
    .method("get", &Counter::get)
    .method("slow_add", &Counter::slow_add)
    .method("overlapped", &Counter::overlapped)
    .method("wait_at", &Counter::wait_at)
    .method("later", &Counter::later)
    .method("as_tensor", &Counter::as_tensor)
    .idempotent("get")       // RS7 of Note [Restartable values]
    .idempotent("wait_at");  // the same nested call again

CASTOR_CLASS(ArrivalRound)
    .constructor<int64_t>()
    .method("push", &ArrivalRound::push)
    .method("close", &ArrivalRound::close)
    .method("close_in", &ArrivalRound::close_in)
    .method("hold_at", &ArrivalRound::hold_at)
    .method("log", &ArrivalRound::log)
    .method("whose", &ArrivalRound::whose)
    .method("raise", &ArrivalRound::raise)
    .method("wait_inside", &ArrivalRound::wait_inside)
    .runs_on_arrival("push")  // Note [Methods run on arrival]
    .runs_on_arrival("close")
    .runs_on_arrival("whose")
    .runs_on_arrival("raise")
    .runs_on_arrival("wait_inside");

// Pushes `v` into the round from this worker (a nested call: it waits).
CASTOR_FUNCTION(push_to_round, [](RRef<ArrivalRound> r, int64_t v) { return r.rpc_sync<int64_t>("push", v); });

// Restartable values (Note [Restartable values]): a Counter RRef kept on a
// worker between calls, and a value that a second life refuses to make.
std::mutex held_counters_mtx;
std::map<std::string, RRef<Counter>> held_counters;  // "worker/key" -> RRef
CASTOR_FUNCTION(hold_counter, [](std::string key, RRef<Counter> r) {
  std::lock_guard<std::mutex> lock(held_counters_mtx);
  held_counters[current_worker().name() + "/" + key] = r;
  return true;
});
CASTOR_FUNCTION(add_to_held_counter, [](std::string key, int64_t x) {
  RRef<Counter> r;
  {
    std::lock_guard<std::mutex> lock(held_counters_mtx);
    r = held_counters.at(current_worker().name() + "/" + key);
  }
  return r.rpc_sync<int64_t>("add", x);
});
CASTOR_FUNCTION(first_life_only, [](int64_t x) {
  const char* life = std::getenv("CASTOR_INCARNATION");
  if (life && std::string(life) != "1") throw std::runtime_error("first_life_only refuses life " + std::string(life));
  return x;
});

Ledger::Ledger(int64_t start) : total_(start), weights_(at::arange(4, at::kFloat) * double(start)) {}

int64_t Ledger::add(int64_t x) {
  weights_ = weights_ + double(x);
  return total_ += x;
}

bool Ledger::fail_saves(bool yes) { return fail_ = yes; }

bool Ledger::slow_saves(int64_t ms) {
  save_delay_ms_ = ms;
  return true;
}

void Ledger::save(torch::serialize::OutputArchive& archive) const {
  if (save_delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(save_delay_ms_));
  if (fail_) throw std::runtime_error("Ledger: this save fails on purpose");
  archive.write("total", at::scalar_tensor(total_, at::kLong));
  archive.write("weights", weights_);
}

void Ledger::load(torch::serialize::InputArchive& archive) {
  at::Tensor total;
  archive.read("total", total);
  archive.read("weights", weights_);
  total_ = total.item<int64_t>();
}

CASTOR_CLASS(Ledger)
    .constructor<int64_t>()
    .method("add", &Ledger::add)
    .method("total", &Ledger::total)
    .method("weights", &Ledger::weights)
    .method("fail_saves", &Ledger::fail_saves)
    .method("slow_saves", &Ledger::slow_saves)
    .checkpointed();

CASTOR_CLASS(GatedObject).constructor<std::string>().method("get", &GatedObject::get);

CASTOR_CLASS(SharedCounter)
    .constructor<>()
    .method("slow_add", &SharedCounter::slow_add)
    .method("max_in_flight", &SharedCounter::max_in_flight)
    .concurrent();

// Creates an RRef owned by `owner` from this worker and keeps it under `key`.
CASTOR_FUNCTION(create_held, [](std::string key, std::string owner, double value) {
  auto r = current_worker().remote<at::Tensor>(owner, "identity", at::full({1}, value));
  std::lock_guard<std::mutex> lock(castor::test::held_mtx);
  castor::test::held[current_worker().name() + "/" + key] = r;
  return true;
});
CASTOR_FUNCTION(held_value, [](std::string key) {
  RRef<at::Tensor> r;
  {
    std::lock_guard<std::mutex> lock(castor::test::held_mtx);
    r = castor::test::held.at(current_worker().name() + "/" + key);
  }
  return r.to_here().item<double>();
});

// -- distributed autograd ------------------------------------------------------

#include <torch/csrc/autograd/custom_function.h>

#include "engine/context.hpp"

namespace {
// A function whose backward throws, to test failures inside a backward pass.
struct ExplodingBackward : torch::autograd::Function<ExplodingBackward> {
  static at::Tensor forward(torch::autograd::AutogradContext*, at::Tensor x) { return x * 1; }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*, torch::autograd::variable_list) {
    throw std::runtime_error("backward exploded");
  }
};
// A function whose backward takes `ms` milliseconds (user code that is slow or stuck).
struct SlowBackward : torch::autograd::Function<SlowBackward> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor x, int64_t ms) {
    ctx->saved_data["ms"] = ms;
    return x * 1;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ctx->saved_data["ms"].toInt()));
    return {g[0], at::Tensor()};
  }
};
// A function whose backward waits at gate `name` (test::gate), at most 30 s.
struct GatedBackward : torch::autograd::Function<GatedBackward> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor x, std::string name) {
    ctx->saved_data["gate"] = name;
    return x * 1;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    if (!castor::test::gate(ctx->saved_data["gate"].toStringRef()).pass(std::chrono::seconds(30)))
      throw std::runtime_error("the backward's gate was not opened within 30 s");
    return {g[0], at::Tensor()};
  }
};
// `held` + peer's x * x. The sum's edges are [held, received]: the received
// tensor's RecvRpcBackward runs first (D1 of Note [Drain order]), so its
// gradient for the peer is ready while `held`'s node (user code: heavy) is
// still to run, and leaves before it (D2).
at::Tensor beside_a_hop(const std::string& peer, const at::Tensor& held, const at::Tensor& x) {
  return held + castor::current_worker().rpc_sync<at::Tensor>(peer, "mul_pair", x, x);
}
at::Tensor& shared_param() {
  static at::Tensor p = at::full({3}, 2.0).set_requires_grad(true);
  return p;
}
}  // namespace

CASTOR_FUNCTION(mul_pair, [](at::Tensor a, at::Tensor b) { return a * b; });
CASTOR_FUNCTION(lin, [](at::Tensor x, at::Tensor w, at::Tensor b) { return x.matmul(w) + b; });
CASTOR_FUNCTION(tanh_of, [](at::Tensor x) { return x.tanh(); });
CASTOR_FUNCTION(nested_mul, [](std::string peer, at::Tensor a, at::Tensor b) {
  return current_worker().rpc_sync<at::Tensor>(peer, "mul_pair", a, b) * a;
});
CASTOR_FUNCTION(explode, [](at::Tensor x) { return ExplodingBackward::apply(x); });
CASTOR_FUNCTION(slow_backward, [](at::Tensor x, int64_t ms) { return SlowBackward::apply(x, ms); });
CASTOR_FUNCTION(hop_beside_gated_backward, [](std::string peer, std::string gate, at::Tensor x) {
  return beside_a_hop(peer, GatedBackward::apply(x, gate), x);
});
CASTOR_FUNCTION(hop_beside_slow_backward, [](std::string peer, int64_t ms, at::Tensor x) {
  return beside_a_hop(peer, SlowBackward::apply(x, ms), x);
});
CASTOR_FUNCTION(hop_beside_explosion, [](std::string peer, at::Tensor x) {
  return beside_a_hop(peer, ExplodingBackward::apply(x), x);
});
// The gradient flowing into the intermediate is scaled by a hook registered here.
CASTOR_FUNCTION(hooked, [](at::Tensor x) {
  auto y = x * 2;
  y.register_hook([](at::Tensor g) { return g * 10; });
  return y * 1;
});
// A parameter shared by every caller of this worker (one per process).
CASTOR_FUNCTION(use_param, [](at::Tensor x) { return x * shared_param(); });
CASTOR_FUNCTION(param_grad, [](int64_t context_id) {
  auto grads = castor::autograd::get_gradients(current_worker(), context_id);
  return grads.at(shared_param());
});
// Makes an autograd context on this worker with a call to `peer` recorded
// in it, and keeps it open until the process ends: a context whose creator
// may be killed while `peer` holds its part.
CASTOR_FUNCTION(open_context_with, [](std::string peer) {
  static std::optional<castor::autograd::Context> kept;
  kept.emplace(current_worker());
  auto x = at::ones({2}).set_requires_grad(true);
  current_worker().rpc_sync<at::Tensor>(peer, "my_add", x, x);
  return kept->id();
});
CASTOR_FUNCTION(param_grad_count, [](int64_t context_id) {
  return int64_t(castor::autograd::get_gradients(current_worker(), context_id).size());
});

// -- optimizer and remote modules ---------------------------------------------

#include <torch/nn/modules/linear.h>

#include "optimizer/remote_module.hpp"

CASTOR_REMOTE_MODULE(torch::nn::Linear, int64_t, int64_t);
// Parameter RRefs of one Linear(3, 1) kept by the worker that first runs this.
CASTOR_FUNCTION(shared_linear_params, [] {
  static torch::nn::Linear layer(3, 1);
  std::vector<RRef<at::Tensor>> out;
  for (auto& p : layer->parameters()) out.push_back(current_worker().make_rref(p));
  return out;
});


// Keeps `r` (as hold does), then sleeps: the caller's share of `r` is in
// flight while this runs (test_deaths.cpp kills the worker meanwhile).
CASTOR_FUNCTION(hold_and_sleep, [](std::string key, RRef<at::Tensor> r, int64_t ms) {
  {
    std::lock_guard<std::mutex> lock(castor::test::held_mtx);
    castor::test::held[current_worker().name() + "/" + key] = r;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return true;
});
