// DeadlineBoard: entries by deadline, with an index by id for unwatch.
#include "engine/deadline_board.hpp"

namespace castor::detail {

uint64_t DeadlineBoard::watch(Clock::time_point due, caf::strong_actor_ptr task, bool& sooner) {
  std::lock_guard<std::mutex> lock(mtx_);
  sooner = false;
  if (closed_) return 0;
  auto id = next_id_++;
  by_id_.emplace(id, due_.emplace(due, std::make_pair(id, std::move(task))));
  sooner = plan_.add(due);  // Note [Sweep plan]
  return id;
}

void DeadlineBoard::unwatch(uint64_t id) {
  std::lock_guard<std::mutex> lock(mtx_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  due_.erase(it->second);
  by_id_.erase(it);
}

std::vector<caf::strong_actor_ptr> DeadlineBoard::take_due(Clock::time_point now,
                                                           std::optional<Clock::time_point>& next) {
  std::vector<caf::strong_actor_ptr> out;
  std::lock_guard<std::mutex> lock(mtx_);
  while (!due_.empty() && due_.begin()->first <= now) {
    by_id_.erase(due_.begin()->second.first);
    out.push_back(std::move(due_.begin()->second.second));
    due_.erase(due_.begin());
  }
  next = plan_.swept(now, due_.empty() ? std::nullopt : std::optional(due_.begin()->first));
  return out;
}

void DeadlineBoard::close() {
  std::lock_guard<std::mutex> lock(mtx_);
  closed_ = true;
  by_id_.clear();
  due_.clear();
}

}  // namespace castor::detail
