// Fault decisions, seeded so that a failing test can be replayed.
#include "actors/runtime/fault_injection.hpp"

namespace castor::detail {

FaultPlan FaultInjector::decide(const std::string& message) {
  FaultPlan plan;
  if (!cfg_.enabled()) return plan;
  std::lock_guard<std::mutex> lock(mtx_);
  std::uniform_real_distribution<double> coin(0, 1);
  for (const auto& r : cfg_.rules) {
    if (r.message != "*" && r.message != message) continue;
    int n = seen_[r.message]++;
    if (n < r.drop_first || coin(rng_) < r.drop_probability) {
      plan.drop = true;
      return plan;
    }
    if (coin(rng_) < r.duplicate_probability) plan.copies = 2;
    plan.delay += r.delay;
    if (coin(rng_) < r.reorder_probability) {
      std::uniform_int_distribution<int64_t> window(0, r.reorder_window.count());
      plan.delay += std::chrono::milliseconds(window(rng_));
    }
  }
  return plan;
}

}  // namespace castor::detail
