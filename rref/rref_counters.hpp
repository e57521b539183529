// Counters of one worker's RRef state, for rref_debug_info(), inspection and
// termination detection. Updated by the RRef actors, read from anywhere.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace castor::detail {

class WorkerServices;

struct RRefCounters {
  std::atomic<int64_t> owners{0};            // OwnerRRef actors alive here
  std::atomic<int64_t> forks{0};             // forks counted by those owners
  std::atomic<int64_t> pending_fetches{0};   // to_here requests waiting for a value
  std::atomic<int64_t> pending_users{0};     // our forks awaiting the owner's confirmation
  std::atomic<int64_t> pending_children{0};  // forks we gave away, not yet confirmed (G2)
  std::atomic<int64_t> outbox{0};            // control messages awaiting an ack
  std::atomic<int64_t> user_rrefs{0};        // user-side states alive here
};

RRefCounters& rref_counters(WorkerServices& rt);
std::shared_ptr<RRefCounters> rref_counters_ptr(WorkerServices& rt);

}  // namespace castor::detail
