// DistributedOptimizer: one local optimizer per owner, steps in parallel.
#include "optimizer/dist_optimizer.hpp"

#include <map>

namespace castor::optim {

DistributedOptimizer::DistributedOptimizer(Worker& w, Spec spec, const std::vector<RRef<at::Tensor>>& params)
    : w_(&w), spec_(std::move(spec)) {
  if (auto why = invalid_reason(spec_))
    throw TypeError(ErrorInfo{ErrorKind::Type, w.name(), "DistributedOptimizer: " + *why});
  std::map<std::string, std::vector<RRef<at::Tensor>>> by_owner;
  for (const auto& p : params) by_owner[p.owner_name()].push_back(p);
  std::vector<std::pair<std::string, Future<int64_t>>> creating;
  for (auto& [owner, ps] : by_owner)
    creating.emplace_back(owner, w.rpc_async<int64_t>(owner, "castor.optim.create", to_value(spec_), ps));
  for (auto& [owner, f] : creating) owners_.emplace_back(owner, f.wait());
}

Future<void> DistributedOptimizer::step_async(int64_t context_id) {
  std::vector<Future<bool>> steps;
  steps.reserve(owners_.size());
  for (const auto& [owner, id] : owners_) steps.push_back(w_->rpc_async<bool>(owner, "castor.optim.step", id, context_id));
  return collect_all(std::move(steps)).then([](std::vector<Future<bool>> done) {
    for (auto& f : done) f.value();  // the first error, in order, is the result
  });
}

void DistributedOptimizer::step(int64_t context_id) { step_async(context_id).wait(); }

}  // namespace castor::optim
