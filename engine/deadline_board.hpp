// DeadlineBoard: this worker's graph tasks that wait with a deadline (for an
// answer to their gradients, or for gradients while stalled), in one ordered
// index. The worker actor's sweep serves them all, so a pass arms no timer of
// its own (Note [Graph task watchdog]).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include <caf/actor_control_block.hpp>

#include "actors/calls/sweep_plan.hpp"

namespace castor::detail {

class DeadlineBoard {
 public:
  using Clock = std::chrono::steady_clock;

  /// Watches `task` until `due`; returns the entry's id. Sets `sooner` when
  /// `due` comes before the sweep already planned (or none is): the caller
  /// then asks the worker actor for a sweep.
  uint64_t watch(Clock::time_point due, caf::strong_actor_ptr task, bool& sooner);

  /// Drops an entry; a no-op when the sweep already took it.
  void unwatch(uint64_t id);

  /// Removes and returns the tasks now due; `next` receives the time of the
  /// next sweep (Note [Sweep plan]).
  std::vector<caf::strong_actor_ptr> take_due(Clock::time_point now, std::optional<Clock::time_point>& next);

  /// Drops every entry and refuses new ones: the worker stops, and no
  /// reference to an actor may outlive its actor system.
  void close();

 private:
  using Index = std::multimap<Clock::time_point, std::pair<uint64_t, caf::strong_actor_ptr>>;
  std::mutex mtx_;
  Index due_;
  std::unordered_map<uint64_t, Index::iterator> by_id_;
  uint64_t next_id_ = 1;
  SweepPlan plan_;
  bool closed_ = false;
};

}  // namespace castor::detail
