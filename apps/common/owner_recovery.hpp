// An app's objects on other workers, taken back when their workers die and
// rejoin under a restart policy (Note [Owner recovery] in
// owner_recovery.cpp): the pipeline's stages, the RNN's parts.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/api/worker.hpp"

namespace castor::apps {

class OwnerRecovery {
 public:
  /// Watches the workers of `ranks` while it lives, if `enabled` (the job
  /// runs under a restart policy); `app` and `what` ("the stages") word its
  /// lines.
  OwnerRecovery(Worker& w, std::vector<int64_t> ranks, bool enabled, std::chrono::milliseconds rejoin_wait,
                std::string app, std::string what);
  ~OwnerRecovery();
  OwnerRecovery(const OwnerRecovery&) = delete;
  OwnerRecovery& operator=(const OwnerRecovery&) = delete;

  /// Runs `attempt`: true when it ran through. When it fails with an
  /// RpcError for the death of one of the ranks' workers (OR1) and
  /// `recoverable()` says the state can be rebuilt, waits until every rank's
  /// worker is alive again (OR2) and runs `rebuild()` on their new lives,
  /// again as long as one dies meanwhile (OR3): false. Any other error is
  /// rethrown; so is the death when recovery is off or not recoverable.
  bool run(const std::function<void()>& attempt, const std::function<bool()>& recoverable,
           const std::function<void()>& rebuild);

 private:
  bool names_a_rank(const ErrorInfo& e) const;
  bool died_since(uint64_t before) const;
  void await_ranks(const std::string& why) const;

  Worker& w_;
  std::vector<int64_t> ranks_;
  bool enabled_;
  std::chrono::milliseconds rejoin_wait_;
  std::string app_, what_;
  std::shared_ptr<std::atomic<uint64_t>> deaths_;  // seen by the failure handler
  FailureHandlerId handler_ = 0;
};

/// OR5: `own` when every worker of `ranks` runs on this worker's host
/// (where this worker can check their checkpoint files, C5 of Note
/// [Checkpoint]), else "" after a line that says a death will end the job.
std::string own_checkpoint_folder(Worker& w, const std::vector<int64_t>& ranks, const std::string& own,
                                  const std::string& app);

/// OR4: from now on, for the rest of this process, a worker that dies is
/// excused from the graceful shutdown (Note [Shutdown with survivors]),
/// with a line: for a job whose training has ended under a restart policy,
/// whose dead worker's new life finds the job ending (RJ7 of Note [Rejoin]).
void excuse_deaths_after_training(Worker& w);

}  // namespace castor::apps
