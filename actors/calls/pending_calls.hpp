// PendingCalls: our calls awaiting replies, shared by the calling threads
// (which add) and the worker actor (which completes, expires and fails).
// See Note [Direct sends] in call_routing.cpp for why it is not actor state.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/api/registry.hpp"
#include "actors/calls/sweep_plan.hpp"
#include "messages/ids.hpp"

namespace castor::detail {

using Clock = std::chrono::steady_clock;

struct PendingCall {
  WorkerId to = -1;
  std::string function;
  std::chrono::milliseconds timeout{0};
  Completion done;
  uint8_t latency_kind = 0;           // a CallLatencyKind (actors/observe/metrics.hpp)
  Clock::time_point started = Clock::now();  // for the latency histograms
};

class PendingCalls {
 public:
  /// Adds a call. Returns true when its deadline is earlier than the sweep the
  /// actor has scheduled (or none is): the caller must then ask for a sweep.
  bool add(CallId id, PendingCall call);

  /// Removes and returns the call (reply arrived), if still pending.
  std::optional<PendingCall> take(CallId id);

  /// Removes the calls whose deadline passed; `next` receives the time of
  /// the next sweep (Note [Sweep plan]).
  std::vector<PendingCall> take_expired(Clock::time_point now, std::optional<Clock::time_point>& next);

  /// Removes every call matching `which` (a dead peer, shutdown).
  std::vector<PendingCall> take_if(const std::function<bool(const PendingCall&)>& which);

  bool empty() const;
  size_t size() const;
  /// Whether `id` still awaits its reply.
  bool contains(CallId id) const;
  /// Calls awaiting a reply, by the rank they went to (inspection).
  std::map<WorkerId, size_t> count_by_peer() const;

 private:
  struct Entry {
    PendingCall call;
    std::multimap<Clock::time_point, CallId>::iterator deadline;
  };
  mutable std::mutex mtx_;
  std::unordered_map<CallId, Entry> calls_;
  std::multimap<Clock::time_point, CallId> deadlines_;
  SweepPlan plan_;  // the sweep the actor has scheduled
};

}  // namespace castor::detail
