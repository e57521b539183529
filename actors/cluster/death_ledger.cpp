#include "actors/cluster/death_ledger.hpp"

namespace castor::detail {

void DeathLedger::add(WorkerId dead, const std::string& what, int64_t n) {
  if (n <= 0) return;
  std::lock_guard<std::mutex> lock(mtx_);
  released_[dead][what] += n;
}

std::map<WorkerId, DeathLedger::Counts> DeathLedger::snapshot() const {
  std::lock_guard<std::mutex> lock(mtx_);
  return released_;
}

}  // namespace castor::detail
