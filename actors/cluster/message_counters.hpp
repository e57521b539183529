// Counters of termination detection (see Note [Graceful shutdown] in
// actors/cluster/shutdown.cpp): every counted message sent and handled.
#pragma once

#include <atomic>
#include <cstdint>

namespace castor::detail {

/// Written by the worker actor, protocol actors and executor threads.
struct MessageCounters {
  std::atomic<uint64_t> sent{0};      // counted messages sent to any worker (self included)
  std::atomic<uint64_t> received{0};  // counted messages handled
  std::atomic<int64_t> in_flight{0};  // requests received whose reply is not sent yet
};

}  // namespace castor::detail
