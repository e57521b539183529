// When the worker actor's next sweep runs: Note [Sweep plan] below.
#pragma once

#include <chrono>
#include <optional>

namespace castor::detail {

// Note [Sweep plan]
// ~~~~~~~~~~~~~~~~~
// The worker actor's sweep (calls that timed out, graph tasks past their
// deadline: Note [Graph task watchdog]) runs on one timer chain. A thread
// that adds a deadline earlier than the planned sweep asks the actor for a
// sweep, a message that wakes the multiplexer's thread (P2 of Note [Where
// actors run]); later deadlines cost nothing.
//  SW1 A sweep plans the next one at the earliest deadline left.
//  SW2 A sweep that finds no deadline left, when some were added since the
//      sweep before, plans one anyway, kIdleSweep later. In a stream of calls
//      or backward passes the deadlines come and go between sweeps; without
//      SW2 every deadline added after an empty sweep asked for a sweep (perf
//      saw a wake of the multiplexer for about every other rpc_sync and for
//      every backward pass). A chain ends after an idle period in which no
//      deadline was added.
class SweepPlan {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kIdleSweep{1};

  /// A deadline was added: true when it comes before the planned sweep (or
  /// none is planned), so the caller must ask the actor for a sweep.
  bool add(Clock::time_point due) {
    added_ = true;
    if (at_ && *at_ <= due) return false;
    at_ = due;
    return true;
  }

  /// A sweep ran at `now` and left `earliest` as the earliest deadline;
  /// returns when the next sweep must run (SW1, SW2), if at all.
  std::optional<Clock::time_point> swept(Clock::time_point now, std::optional<Clock::time_point> earliest) {
    at_ = earliest;
    if (!at_ && added_) at_ = now + kIdleSweep;
    added_ = false;
    return at_;
  }

 private:
  std::optional<Clock::time_point> at_;  // the sweep the actor has planned
  bool added_ = false;                   // a deadline was added since the last sweep
};

}  // namespace castor::detail
