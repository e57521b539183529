// BackwardWaiters (see Note [Backward at shutdown] in backward_waiters.hpp).
#include "engine/backward_waiters.hpp"

#include <utility>

namespace castor::detail {

uint64_t BackwardWaiters::add(ContextId ctx, Fail fail) {
  {
    std::lock_guard<std::mutex> lock(mtx_);
    if (!closed_) {
      auto id = next_++;
      waiting_.emplace(id, std::make_pair(ctx, std::move(fail)));
      return id;
    }
  }
  fail(stopped_error(ctx));  // BW1: after the stop, at once
  return 0;
}

void BackwardWaiters::remove(uint64_t id) {
  std::lock_guard<std::mutex> lock(mtx_);
  waiting_.erase(id);
}

void BackwardWaiters::close(const std::string& worker) {
  std::unordered_map<uint64_t, std::pair<ContextId, Fail>> all;
  {
    std::lock_guard<std::mutex> lock(mtx_);
    closed_ = true;
    worker_ = worker;
    all.swap(waiting_);
  }
  for (auto& [id, waiter] : all) waiter.second(stopped_error(waiter.first));  // outside the lock: it wakes a caller
}

ErrorInfo BackwardWaiters::stopped_error(ContextId ctx) const {
  return ErrorInfo{ErrorKind::Shutdown, worker_,
                   "worker " + worker_ + " shut down during the backward pass in autograd context " +
                       std::to_string(ctx.as_int())};
}

}  // namespace castor::detail
