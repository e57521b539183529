// What the app is told when a worker dies (Worker::on_worker_failure,
// RRef::on_owner_failure): see the README's "When workers fail".
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "actors/api/worker_options.hpp"

namespace castor {

struct WorkerFailure {
  WorkerInfo worker;                              // the worker that died
  std::chrono::system_clock::time_point since{};  // when this worker found it dead
  std::string cause;                              // "connection lost"

  /// "worker worker2 (rank 2) died: connection lost"
  std::string message() const;
};

/// Runs on the worker's executor, never on an actor's thread: it may call
/// other workers, re-create objects elsewhere, or stop the job.
using WorkerFailureHandler = std::function<void(const WorkerFailure&)>;
/// Given by on_worker_failure / on_owner_failure, for remove_failure_handler.
using FailureHandlerId = uint64_t;

}  // namespace castor
