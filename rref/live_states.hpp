// LiveStates: every RRef handle state made on one worker, weakly, for the
// two things that need them all from any thread: graceful shutdown releases
// the ones still alive (Note [Graceful shutdown]), and castor inspect lists
// the forks here that their owner has not confirmed yet.
#pragma once

#include <mutex>
#include <vector>

#include "actors/observe/inspection.hpp"
#include "rref/rref_state.hpp"

namespace castor::detail {

class LiveStates {
 public:
  /// A new handle state (called by RRefRuntime when it makes one).
  void track(const RRefStatePtr& s);
  /// The states alive now, forgotten here (shutdown releases each once).
  std::vector<RRefStatePtr> take_all();
  /// The states alive now, still tracked (a rejoin re-registers some,
  /// Note [Restartable values]).
  std::vector<RRefStatePtr> alive() const;
  /// The user states alive now that their owner has not confirmed.
  std::vector<PendingUserInfo> unconfirmed() const;

 private:
  mutable std::mutex mtx_;
  std::vector<std::weak_ptr<RRefState>> states_;  // under mtx_; expired ones swept as it grows
  size_t alive_hint_ = 0;                         // under mtx_: states_.size() after the last sweep
};

}  // namespace castor::detail
