// The functions castor-bench calls (registered in every bench process).
#include <ATen/ATen.h>

#include "actors/api/registry.hpp"

CASTOR_FUNCTION(bench_add, [](at::Tensor a, at::Tensor b) { return a + b; });
CASTOR_FUNCTION(bench_ident, [](at::Tensor x) { return x; });

// -- the scale suite (bench/scale_bench.cpp) ---------------------------------------

#include "actors/api/worker.hpp"
#include "rref/rref.hpp"

namespace {
std::string rank_name(int r) { return "worker" + std::to_string(r); }
}  // namespace

CASTOR_FUNCTION(scale_rank, [] { return int64_t(castor::current_worker().rank()); });

// One all-to-all round from this worker: a call to every other worker.
CASTOR_FUNCTION(scale_fan_out, [] {
  auto& w = castor::current_worker();
  std::vector<castor::Future<int64_t>> fs;
  for (int r = 0; r < w.world_size(); ++r)
    if (r != w.rank()) fs.push_back(w.rpc_async<int64_t>(rank_name(r), "scale_rank"));
  int64_t sum = 0;
  for (auto& f : fs) sum += f.wait();
  return sum;
});

CASTOR_FUNCTION(scale_rref_sum, [](castor::RRef<at::Tensor> r) { return r.to_here().sum().item<double>(); });

// The RRef protocol's three-party case from this worker: a value created on
// the next worker, its RRef passed to the one after, fetched there, dropped.
CASTOR_FUNCTION(scale_rref_round, [] {
  auto& w = castor::current_worker();
  int n = w.world_size();
  auto owner = rank_name((w.rank() + 1) % n), user = rank_name((w.rank() + 2) % n);
  auto r = w.remote<at::Tensor>(owner, "aten::ones", std::vector<int64_t>{4});
  return w.rpc_sync<double>(user, "scale_rref_sum", r);
});

CASTOR_FUNCTION(scale_rref_state, [] {
  auto info = castor::current_worker().rref_debug_info();
  return info["num_owner_rrefs"] + info["num_forks"] + info["num_pending_users"] + info["num_pending_children"];
});

// -- the recovery suite (bench/recovery_bench.cpp) ----------------------------------

#include <torch/nn/modules/linear.h>

#include "optimizer/remote_module.hpp"

// Its model-parallel model's remote half.
CASTOR_REMOTE_MODULE(torch::nn::Linear, int64_t, int64_t);
