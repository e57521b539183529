// Counters of one worker's RRef state, for rref_debug_info(), inspection and
// termination detection. Read from anywhere. The gauges are changed only by
// the protocol class that keeps the table they count (see TableGauge); the
// plain atomics by the code named beside each.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include "rref/protocol/table_gauge.hpp"

namespace castor::detail {

class WorkerServices;

struct RRefCounters {
  std::atomic<int64_t> owners{0};           // values owned here (the RRef context's slots: made, ended)
  std::atomic<int64_t> owner_actors{0};     // of those, with an OwnerRRef actor (Note [Light owners])
  TableGauge forks;                         // forks counted by those owners (OwnerForks)
  std::atomic<int64_t> pending_fetches{0};  // to_here requests waiting for a value (answer_fetch)
  TableGauge pending_users;                 // our forks awaiting the owner's confirmation (ForkTable)
  TableGauge pending_children;              // forks we gave away, not yet confirmed, G2 (ForkTable)
  TableGauge outbox;                        // control messages awaiting an ack (Outbox)
  std::atomic<int64_t> user_rrefs{0};       // user-side states alive here (RRefRuntime)
  // Note [Values on arrival], since the start (RRefRuntime::handle_request):
  std::atomic<int64_t> values_on_arrival{0};   // remote() calls started by the thread that received them (V2)
  std::atomic<int64_t> fetches_on_arrival{0};  // fetches answered from the OwnerIndex's holder (V3)
  std::atomic<int64_t> forks_borrowed{0};      // RRef arguments taken by value, fetched with no fork (G3)
};

/// What inspection sees of one owned value (castor inspect).
struct OwnerStats {
  TableGauge forks;  // its live forks (its OwnerForks)
  const std::chrono::steady_clock::time_point created = std::chrono::steady_clock::now();
};

RRefCounters& rref_counters(WorkerServices& rt);
std::shared_ptr<RRefCounters> rref_counters_ptr(WorkerServices& rt);

}  // namespace castor::detail
