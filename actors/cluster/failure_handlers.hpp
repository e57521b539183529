// FailureHandlers: the app's supervision hooks (Worker::on_worker_failure,
// RRef::on_owner_failure) and the deaths they were told of.
//
// Note [Failure handlers]
// ~~~~~~~~~~~~~~~~~~~~~~~
//  F1. Every handler is called exactly once for every death it covers,
//      whichever comes first, the death or the registration: a handler
//      registered after a worker died is called for it too. Both sides take
//      the same lock, so each (handler, death) pair is dispatched by the
//      later of the two.
//  F2. Handlers run through the worker's callback runner (its executor),
//      never on an actor's thread, so they may block and call other
//      workers. One that throws is reported on stderr, naming the dead
//      worker and the error; it never takes the process down.
//  F3. A death for which a worker-wide handler was dispatched is "taken in
//      charge" by the app, decided at dispatch, on the thread that records
//      the death (so graceful shutdown, on the worker actor, reads a settled
//      fact): rank 0's graceful shutdown then ends among the survivors
//      (Note [Shutdown with survivors] in shutdown.cpp). Handlers scoped to
//      one owner (on_owner_failure) only notify.
//  F4. Deaths found while this worker is leaving are not reported: peers
//      that close their connections then are the job's normal end (rank 0
//      once it told everyone to leave, any other rank once in shutdown,
//      where rank 0 decides).
//  F5. A rejoin undoes a death (Note [Rejoin]): a handler registered after
//      the worker's new life came back is not told of its old life's death,
//      and the rank is no longer taken in charge, so that a death of the new
//      life counts only if a handler is there to hear of it.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include "actors/api/future.hpp"
#include "actors/api/worker_failure.hpp"
#include "messages/ids.hpp"

namespace castor::detail {

class FailureHandlers {
 public:
  /// `only`: the handler covers that worker alone (an RRef's owner), and
  /// does not take its death in charge (F3).
  FailureHandlerId add(WorkerFailureHandler handler, std::optional<WorkerId> only, const CallbackRunner& run);
  /// False if `id` is unknown (already removed). A handler running now
  /// finishes.
  bool remove(FailureHandlerId id);
  /// Called once per death, by liveness, before graceful shutdown hears of it.
  void on_death(const WorkerFailure& failure, const CallbackRunner& run);
  /// F5: `rank` lives again, in a new life.
  void on_rejoin(WorkerId rank);
  /// F3: a worker-wide handler was dispatched for this death.
  bool taken_in_charge(WorkerId rank) const;
  size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<const WorkerFailureHandler> handler;
    std::optional<WorkerId> only;
  };
  static void dispatch(const std::shared_ptr<const WorkerFailureHandler>& handler, const WorkerFailure& failure,
                       const CallbackRunner& run);

  mutable std::mutex mtx_;
  FailureHandlerId next_id_ = 1;
  std::map<FailureHandlerId, Entry> handlers_;
  std::vector<WorkerFailure> deaths_;
  std::set<WorkerId> in_charge_;
};

}  // namespace castor::detail
