// OwnerIndex: the values owned on one worker, mirrored for castor inspect.
// The RRef context actor keeps the owners themselves (OwnerDirectory); it
// adds and removes each one here too, so that other threads can list them
// under a mutex without asking an actor.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "actors/observe/inspection.hpp"
#include "messages/ids.hpp"
#include "rref/holder.hpp"
#include "rref/rref_counters.hpp"

namespace castor::detail {

class OwnerIndex {
 public:
  void added(RRefId id, std::shared_ptr<Holder> holder, std::shared_ptr<OwnerStats> stats);
  void removed(RRefId id);
  /// Each owned value now: what it holds, its forks, its age.
  std::vector<OwnedRRefInfo> owned() const;

 private:
  struct Entry {
    std::shared_ptr<Holder> holder;
    std::shared_ptr<OwnerStats> stats;  // its forks gauge is kept by the owner's OwnerForks
  };
  mutable std::mutex mtx_;
  std::unordered_map<RRefId, Entry> entries_;  // under mtx_
};

}  // namespace castor::detail
