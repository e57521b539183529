// RestartPolicy (see Note [Restartable values] in restart.hpp).
#include "rref/restart.hpp"

#include <algorithm>

namespace castor::detail {

std::optional<std::string> unusable_recipe_args(const std::vector<Value>& args) {
  int64_t bytes = 0;
  for (auto a : args) {  // a copy: for_each_tensor visits mutable values
    if (a.contains_rref()) return "an argument is an RRef, whose fork cannot be kept for a restart";
    a.for_each_tensor([&](at::Tensor& t) { bytes += int64_t(t.numel()) * int64_t(t.element_size()); });
  }
  if (bytes > kMaxRecipeBytes)
    return "its tensors take " + std::to_string(bytes) + " bytes, more than the " + std::to_string(kMaxRecipeBytes) +
           " a restart recipe may keep (they travel with every fork)";
  return std::nullopt;
}

RestartPolicy::RestartPolicy(std::shared_ptr<const RestartRecipe> recipe, uint32_t restarts, uint32_t settled_with)
    : recipe_(std::move(recipe)), restarts_(restarts), settled_with_(settled_with) {}

uint32_t RestartPolicy::restarts() const {
  std::lock_guard<std::mutex> lock(mtx_);
  return restarts_;
}

bool RestartPolicy::begin(uint32_t incarnation, ErrorInfo if_spent) {
  std::vector<std::pair<uint32_t, Settled>> failed;
  {
    std::lock_guard<std::mutex> lock(mtx_);
    if (failure_) return false;
    if (restarts_ < recipe_->max_restarts) return incarnation > settled_with_;
    failure_ = std::move(if_spent);  // RS3
    failed.swap(waiting_);
  }
  for (auto& [life, then] : failed) then(failure());
  return false;
}

void RestartPolicy::finish(uint32_t incarnation, std::optional<ErrorInfo> failure) {
  std::vector<std::pair<uint32_t, Settled>> ready;
  {
    std::lock_guard<std::mutex> lock(mtx_);
    if (failure) {
      if (!failure_) failure_ = std::move(failure);
    } else if (incarnation > settled_with_) {
      ++restarts_;
    }
    settled_with_ = std::max(settled_with_, incarnation);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (failure_ || it->first <= settled_with_) {
        ready.push_back(std::move(*it));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
  }
  auto outcome = this->failure();
  for (auto& [life, then] : ready) then(outcome);
}

void RestartPolicy::when_settled(uint32_t incarnation, Settled then) {
  std::optional<ErrorInfo> outcome;
  {
    std::lock_guard<std::mutex> lock(mtx_);
    if (!failure_ && settled_with_ < incarnation) {
      waiting_.emplace_back(incarnation, std::move(then));
      return;
    }
    outcome = failure_;
  }
  then(std::move(outcome));
}

std::optional<ErrorInfo> RestartPolicy::failure() const {
  std::lock_guard<std::mutex> lock(mtx_);
  return failure_;
}

}  // namespace castor::detail
