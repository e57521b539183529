// OwnerDirectory: the values owned on one worker, by rref id, and the ones
// that ended. Plain data, with the slot type left open: the RRef context
// keeps its owner slots in one (Note [Light owners]), the unit tests'
// simulated workers their OwnerForks.
#pragma once

#include <chrono>
#include <deque>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "messages/ids.hpp"

namespace castor::detail {

template <class Slot>
class OwnerDirectory {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  /// How long an ended value is remembered. Only a late copy of a control
  /// message (a retry in flight when the ack arrived) can name an ended
  /// value: no fork of it is left (G1, G2), so no new message will. Those
  /// copies are a network delay late, not minutes; remembering every ended
  /// value for the worker's life would grow without bound in a long job.
  static constexpr std::chrono::minutes kTombstoneGrace{10};

  Slot* find(RRefId id) {
    auto it = slots_.find(id);
    return it == slots_.end() ? nullptr : &it->second;
  }

  /// The owner of `id`, made by `make()` if there is none yet (a message
  /// about a value may arrive before the request that creates it). Nothing
  /// if it ended: idempotence, a late or repeated message never revives a
  /// value (see Note [RRef protocol]).
  template <class Make>
  Slot* find_or_make(RRefId id, Make&& make) {
    if (auto* slot = find(id)) return slot;
    if (ended_.count(id)) return nullptr;
    return &slots_.emplace(id, make()).first->second;
  }

  /// The owner of `id` ended at `now`: forgotten, and not made again for
  /// kTombstoneGrace. Tombstones older than that are dropped here.
  void ended(RRefId id, time_point now) {
    slots_.erase(id);
    if (ended_.insert(id).second) tombstones_.emplace_back(now, id);
    while (!tombstones_.empty() && now - tombstones_.front().first > kTombstoneGrace) {
      ended_.erase(tombstones_.front().second);
      tombstones_.pop_front();
    }
  }

  bool has_ended(RRefId id) const { return ended_.count(id) > 0; }
  size_t size() const { return slots_.size(); }
  size_t tombstones() const { return ended_.size(); }

  template <class F>
  void for_each(F&& f) {
    for (auto& [id, slot] : slots_) f(id, slot);
  }
  template <class F>
  void for_each(F&& f) const {
    for (const auto& [id, slot] : slots_) f(id, slot);
  }

 private:
  std::unordered_map<RRefId, Slot> slots_;  // find_or_make adds, ended removes
  std::unordered_set<RRefId> ended_;        // ended adds; dropped after kTombstoneGrace
  std::deque<std::pair<time_point, RRefId>> tombstones_;  // ended_ in the order they ended
};

}  // namespace castor::detail
