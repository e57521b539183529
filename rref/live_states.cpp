// LiveStates (see live_states.hpp).
#include "rref/live_states.hpp"

#include <algorithm>
#include <chrono>

namespace castor::detail {

void LiveStates::track(const RRefStatePtr& s) {
  std::lock_guard<std::mutex> lock(mtx_);
  if (states_.size() >= 1024 && states_.size() >= 2 * alive_hint_) {
    states_.erase(std::remove_if(states_.begin(), states_.end(), [](const auto& w) { return w.expired(); }),
                  states_.end());
    alive_hint_ = states_.size();
  }
  states_.push_back(s);
}

std::vector<RRefStatePtr> LiveStates::take_all() {
  std::lock_guard<std::mutex> lock(mtx_);
  std::vector<RRefStatePtr> out;
  for (auto& w : states_)
    if (auto s = w.lock()) out.push_back(std::move(s));
  states_.clear();
  return out;
}

std::vector<RRefStatePtr> LiveStates::alive() const {
  std::lock_guard<std::mutex> lock(mtx_);
  std::vector<RRefStatePtr> out;
  for (auto& w : states_)
    if (auto s = w.lock()) out.push_back(std::move(s));
  return out;
}

std::vector<PendingUserInfo> LiveStates::unconfirmed() const {
  auto now = std::chrono::steady_clock::now();
  std::vector<PendingUserInfo> out;
  // Released after the lock: a handle whose last other copy went meanwhile
  // ends with ours, and its end messages the RRef context, which may take
  // this lock (a new handle is tracked).
  std::vector<RRefStatePtr> seen;
  std::lock_guard<std::mutex> lock(mtx_);
  for (auto& w : states_) {
    auto s = w.lock();
    if (!s) continue;
    seen.push_back(s);
    if (s->is_owner() || s->confirmed.load()) continue;
    auto age = std::chrono::duration_cast<std::chrono::milliseconds>(now - s->created).count();
    out.push_back(PendingUserInfo{to_string(s->id), to_string(s->fork), s->owner_name, int64_t(age)});
  }
  return out;
}

}  // namespace castor::detail
