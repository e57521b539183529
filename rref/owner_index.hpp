// OwnerIndex: the values owned on one worker, by rref id, for the threads
// that are not the RRef context actor: castor inspect lists them, and a
// link's reader starts remote() and answers fetches from their holders
// (Note [Values on arrival]). The context keeps the owners themselves
// (OwnerDirectory) and adds and removes each one here too; a holder may be
// here before its owner is made (holder_for: V1).
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
  /// V1 of Note [Values on arrival]: the holder of `id`, the one here or
  /// else `fresh` (a new one if null), which is kept for it from now on.
  std::shared_ptr<Holder> holder_for(RRefId id, std::shared_ptr<Holder> fresh = nullptr);
  /// The holder of `id`, if it is here.
  std::shared_ptr<Holder> find(RRefId id) const;
  /// The context made the owner of `id`, holding `holder` (from holder_for).
  void added(RRefId id, std::shared_ptr<Holder> holder, std::shared_ptr<OwnerStats> stats);
  void removed(RRefId id);
  /// Each owned value now: what it holds, its forks, its age.
  std::vector<OwnedRRefInfo> owned() const;

 private:
  struct Entry {
    std::shared_ptr<Holder> holder;
    std::shared_ptr<OwnerStats> stats;  // its forks gauge is kept by the owner's OwnerForks; null until added
  };
  mutable std::mutex mtx_;
  std::unordered_map<RRefId, Entry> entries_;  // under mtx_
};

}  // namespace castor::detail
