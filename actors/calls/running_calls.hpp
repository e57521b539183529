// RunningCalls: the requests from others that this worker is serving now,
// with their function, caller and start, so that a shutdown past its bound
// and `castor inspect` can say which calls are still running and for how
// long (Note [Shutdown bound] in actors/cluster/shutdown.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "messages/ids.hpp"

namespace castor::detail {

class RunningCalls {
 public:
  using Clock = std::chrono::steady_clock;

  struct Entry {
    std::string function;
    WorkerId caller = -1;
    Clock::time_point since;
  };

  /// Records a request now being served; the ticket ends it.
  uint64_t begin(std::string function, WorkerId caller);
  void end(uint64_t ticket);

  /// The calls running now, oldest first.
  std::vector<Entry> snapshot() const;

 private:
  mutable std::mutex mtx_;
  uint64_t next_ = 0;
  std::unordered_map<uint64_t, Entry> running_;
};

}  // namespace castor::detail
