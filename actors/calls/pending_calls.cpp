// PendingCalls: a map by id plus an ordered index of deadlines.
#include "actors/calls/pending_calls.hpp"

namespace castor::detail {

bool PendingCalls::add(CallId id, PendingCall call) {
  auto deadline = Clock::now() + call.timeout;
  std::lock_guard<std::mutex> lock(mtx_);
  auto dl = deadlines_.emplace(deadline, id);
  calls_.emplace(id, Entry{std::move(call), dl});
  return plan_.add(deadline);  // Note [Sweep plan]
}

std::optional<PendingCall> PendingCalls::take(CallId id) {
  std::lock_guard<std::mutex> lock(mtx_);
  auto it = calls_.find(id);
  if (it == calls_.end()) return std::nullopt;
  auto call = std::move(it->second.call);
  deadlines_.erase(it->second.deadline);
  calls_.erase(it);
  return call;
}

std::vector<PendingCall> PendingCalls::take_expired(Clock::time_point now, std::optional<Clock::time_point>& next) {
  std::vector<PendingCall> out;
  std::lock_guard<std::mutex> lock(mtx_);
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    auto it = calls_.find(deadlines_.begin()->second);
    deadlines_.erase(deadlines_.begin());
    out.push_back(std::move(it->second.call));
    calls_.erase(it);
  }
  next = plan_.swept(now, deadlines_.empty() ? std::nullopt : std::optional(deadlines_.begin()->first));
  return out;
}

std::vector<PendingCall> PendingCalls::take_if(const std::function<bool(const PendingCall&)>& which) {
  std::vector<PendingCall> out;
  std::lock_guard<std::mutex> lock(mtx_);
  for (auto it = calls_.begin(); it != calls_.end();) {
    if (which(it->second.call)) {
      deadlines_.erase(it->second.deadline);
      out.push_back(std::move(it->second.call));
      it = calls_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

bool PendingCalls::empty() const {
  std::lock_guard<std::mutex> lock(mtx_);
  return calls_.empty();
}

bool PendingCalls::contains(CallId id) const {
  std::lock_guard<std::mutex> lock(mtx_);
  return calls_.count(id) != 0;
}

size_t PendingCalls::size() const {
  std::lock_guard<std::mutex> lock(mtx_);
  return calls_.size();
}

std::map<WorkerId, size_t> PendingCalls::count_by_peer() const {
  std::lock_guard<std::mutex> lock(mtx_);
  std::map<WorkerId, size_t> out;
  for (auto& [id, e] : calls_) ++out[e.call.to];
  return out;
}

}  // namespace castor::detail
