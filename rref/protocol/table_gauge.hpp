// TableGauge: the size of one RRef protocol table, published for readers on
// other threads (rref_debug_info(), castor inspect, the shutdown's idle check).
#pragma once

#include <atomic>
#include <cstdint>

namespace castor::detail {

class ForkTable;
class Outbox;
class OwnerForks;

/// A count that must agree with a table kept by one of the protocol classes.
/// A map that must agree with a counter owns the counter: only the class
/// that changes the map may change its gauge, in the same step, so no
/// caller can erase from one and forget the other. Anyone may read it.
class TableGauge {
 public:
  int64_t load() const { return value_.load(std::memory_order_relaxed); }

 private:
  friend class ForkTable;   // pending users, pending children
  friend class Outbox;      // unacknowledged control messages
  friend class OwnerForks;  // forks counted by owners

  void add(int64_t delta) { value_.fetch_add(delta, std::memory_order_relaxed); }

  std::atomic<int64_t> value_{0};
};

}  // namespace castor::detail
