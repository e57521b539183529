// The floor of a synchronous parameter-server round on this machine: the
// parameter-server app's job (1 server + N trainers, the same model, data,
// seed, batch and arithmetic) in N+1 processes forked from this one, with no
// framework between them. The parameters and the pushed gradients live in
// one shared mapping, so nothing is copied across processes (a trainer
// writes its gradients into its slot, as a push must hand them over once);
// each hop is one byte on a socket pair. What is left is the arithmetic and
// the waits of a round: castor's `train_ps_samples_per_s` is read against
// it, and so is the single-process reference (whether a target for
// synchronous rounds on three processes can be reached at all).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "apps/parameter_server/parameter_server.hpp"

namespace castor::bench {

class SyncRoundFloor {
 public:
  /// Forks the server and the trainers, which wait for next_epoch(): make
  /// it before any worker starts (floors.hpp says why).
  SyncRoundFloor(const apps::ps::PsConfig& cfg, int64_t trainers);
  ~SyncRoundFloor();
  SyncRoundFloor(const SyncRoundFloor&) = delete;
  SyncRoundFloor& operator=(const SyncRoundFloor&) = delete;

  /// Trains the next epoch; throws if a process of the floor went away.
  apps::ps::EpochResult next_epoch();

 private:
  struct Shared;
  apps::ps::PsConfig cfg_;
  int64_t trainers_;
  std::unique_ptr<Shared> shared_;
  int control_ = -1;  // to the server
  std::vector<pid_t> children_;
  int64_t epoch_ = 0;
};

}  // namespace castor::bench
