// Note [Owner recovery]
// ~~~~~~~~~~~~~~~~~~~~~
// Under a restart policy (R2 of Note [Restart policy]) a worker that dies is
// started again and rejoins under a new incarnation (Note [Rejoin]), but
// nothing of its old life comes back: the objects an app kept there (a
// pipeline's stages, the RNN's parts) must be built again on the new life
// and their state restored from a checkpoint. The app says how (`rebuild`)
// and whether it can (`recoverable`: a checkpoint to go back to, or nothing
// trained yet); OwnerRecovery finds the death and waits for the rejoin.
//  OR1 A death is an attempt's RpcError that says one of the ranks' workers
//      is unreachable (its kind, and its worker the rank's name), or one the
//      failure handler saw, or one of their workers found dead, within 2 s
//      of the attempt's error: the driver may learn of a failed call before
//      the handler runs, or before it finds the worker dead itself (another
//      worker saw it first, and the error came from there). Any other
//      RpcError is the app's and is rethrown once no death shows in those
//      2 s. The handler also takes the deaths in charge (F3 of Note
//      [Failure handlers]).
//  OR2 Every rank's worker must be alive again within `rejoin_wait` (one
//      bound for all of them), or the job fails, naming the worker that did
//      not come back and the death.
//  OR3 A worker that dies again while its objects are rebuilt is waited for
//      again: the launcher's restart budget (R4) bounds how often.
//  OR4 Once training has ended, a death is excused from the graceful
//      shutdown for the rest of the process (excuse_deaths_after_training).
//  OR5 The state comes back from a checkpoint whose files each owner writes
//      where it runs and the driver checks (C5 of Note [Checkpoint]): with no
//      folder given, an app uses one of the job's own only when every owner
//      shares the driver's host (own_checkpoint_folder); otherwise a death
//      during training ends the job, as the driver says at start.
#include "apps/common/owner_recovery.hpp"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "actors/api/errors.hpp"
#include "actors/api/registry.hpp"
#include "apps/common/cpu_binding.hpp"
#include "apps/common/rejoin_wait.hpp"

// OR5: which host a worker runs on, as host_identity names it.
CASTOR_FUNCTION(castor_apps_host, []() { return castor::apps::host_identity(); });

namespace castor::apps {

OwnerRecovery::OwnerRecovery(Worker& w, std::vector<int64_t> ranks, bool enabled, std::chrono::milliseconds rejoin_wait,
                             std::string app, std::string what)
    : w_(w),
      ranks_(std::move(ranks)),
      enabled_(enabled),
      rejoin_wait_(rejoin_wait),
      app_(std::move(app)),
      what_(std::move(what)),
      deaths_(std::make_shared<std::atomic<uint64_t>>(0)) {
  std::sort(ranks_.begin(), ranks_.end());
  ranks_.erase(std::unique(ranks_.begin(), ranks_.end()), ranks_.end());
  if (!enabled_) return;
  handler_ = w_.on_worker_failure([ranks = ranks_, deaths = deaths_](const WorkerFailure& f) {
    if (std::find(ranks.begin(), ranks.end(), f.worker.id) != ranks.end()) deaths->fetch_add(1);
  });
}

OwnerRecovery::~OwnerRecovery() {
  if (enabled_) w_.remove_failure_handler(handler_);
}

bool OwnerRecovery::names_a_rank(const ErrorInfo& e) const {
  if (e.kind != ErrorKind::Unreachable && e.kind != ErrorKind::OwnerDied) return false;
  for (auto rank : ranks_)
    if (w_.get_worker_info(rank).name == e.worker) return true;
  return false;
}

bool OwnerRecovery::died_since(uint64_t before) const {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  do {
    if (deaths_->load() != before) return true;
    for (auto rank : ranks_)
      if (!w_.is_alive(rank)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < deadline);
  return false;
}

void OwnerRecovery::await_ranks(const std::string& why) const {
  // From the line's start: over a progress bar the error left unfinished.
  std::printf("\r%s: %s; waiting for %s to rejoin\n", app_.c_str(), why.c_str(), what_.c_str());
  std::fflush(stdout);
  auto deadline = std::chrono::steady_clock::now() + rejoin_wait_;
  for (auto rank : ranks_)
    if (!await_rejoin(w_, rank,
                      std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::max(deadline - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration{0}))))
      throw std::runtime_error(app_ + ": " + w_.get_worker_info(rank).name + " did not rejoin within " +
                               std::to_string(std::chrono::duration_cast<std::chrono::seconds>(rejoin_wait_).count()) +
                               " s after a death; training cannot go on without it (" + why + ")");
}

bool OwnerRecovery::run(const std::function<void()>& attempt, const std::function<bool()>& recoverable,
                        const std::function<void()>& rebuild) {
  uint64_t before = deaths_->load();
  try {
    attempt();
    return true;
  } catch (const RpcError& e) {
    if (!enabled_ || !recoverable() || !(names_a_rank(e.info()) || died_since(before))) throw;
    for (std::string why = e.what();;) {
      before = deaths_->load();
      try {
        await_ranks(why);
        rebuild();
        return false;
      } catch (const RpcError& again) {  // OR3
        if (!names_a_rank(again.info()) && !died_since(before)) throw;
        why = again.what();
      }
    }
  }
}

std::string own_checkpoint_folder(Worker& w, const std::vector<int64_t>& ranks, const std::string& own,
                                  const std::string& app) {
  auto here = host_identity();
  for (auto rank : ranks) {
    auto name = w.get_worker_info(rank).name;
    if (rank != w.rank() && w.rpc_sync<std::string>(name, "castor_apps_host") != here) {
      std::printf("%s: %s runs on another host and no --checkpoint-dir (on storage every host shares) was given: a "
                  "death during training ends the job\n",
                  app.c_str(), name.c_str());
      std::fflush(stdout);
      return "";
    }
  }
  return own;
}

void excuse_deaths_after_training(Worker& w) {
  static std::once_flag once;
  std::call_once(once, [&] {
    w.on_worker_failure([](const WorkerFailure& f) {
      std::printf("%s after training; the job ends without it\n", f.message().c_str());
      std::fflush(stdout);
    });
  });
}

}  // namespace castor::apps
