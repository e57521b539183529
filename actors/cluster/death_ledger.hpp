// DeathLedger: what each dead worker left behind on this worker and what
// this worker released for it (calls failed, forks dropped, autograd
// contexts ended...), for `castor inspect`. Filled by every layer as it
// cleans up after a death, read by the inspector; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "messages/ids.hpp"

namespace castor::detail {

class DeathLedger {
 public:
  using Counts = std::map<std::string, int64_t>;  // what -> how many

  void add(WorkerId dead, const std::string& what, int64_t n = 1);
  /// Per dead worker; only workers something was released for.
  std::map<WorkerId, Counts> snapshot() const;

 private:
  mutable std::mutex mtx_;
  std::map<WorkerId, Counts> released_;
};

}  // namespace castor::detail
