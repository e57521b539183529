// RRefState: one worker's local state of an RRef, shared by every copy of the
// RRef<T> handles there. Its end releases this worker's reference: a user
// sends its fork's delete to the owner (G1), an owner drops a local reference.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "messages/ids.hpp"
#include "rref/holder.hpp"
#include "rref/restart.hpp"

namespace castor::detail {

class WorkerServices;

struct RRefState {
  RRefId id;
  WorkerId owner = -1;
  std::string owner_name;
  // RJ5 of Note [Rejoin]: the owner's life that holds the value (a
  // restartable value's holder moves to the next life, Note [Restartable values]).
  std::atomic<uint32_t> owner_incarnation{1};
  std::string type_name;
  ForkId fork;                     // users: this worker's fork of the value
  std::shared_ptr<Holder> holder;  // owners: the value itself
  std::shared_ptr<RestartPolicy> restart;  // users of a value made with castor::Restart
  std::atomic<bool> confirmed{false};  // the owner knows this fork (owners: always)
  std::atomic<bool> released{false};   // shutdown released it already; the end sends nothing
  std::weak_ptr<WorkerServices> rt;
  const std::chrono::steady_clock::time_point created = std::chrono::steady_clock::now();  // inspection

  bool is_owner() const { return holder != nullptr; }

  /// What a fork of this RRef carries about a restart policy (owners keep
  /// it in the Holder, users in `restart`): the recipe, or null, and the
  /// re-creations so far.
  std::pair<std::shared_ptr<const RestartRecipe>, uint32_t> restart_recipe() const {
    if (holder) return holder->recipe();
    if (restart) return {restart->recipe(), restart->restarts()};
    return {nullptr, 0};
  }

  /// remote() could not create the value (set once, by the call's
  /// completion on whatever thread it runs; read by the users' threads).
  void set_creation_error(ErrorInfo e) {
    if (creation_failed_.load(std::memory_order_acquire)) return;
    creation_error_ = std::move(e);
    creation_failed_.store(true, std::memory_order_release);  // publishes creation_error_
  }
  std::optional<ErrorInfo> creation_error() const {
    if (!creation_failed_.load(std::memory_order_acquire)) return std::nullopt;
    return creation_error_;
  }

  ~RRefState();

 private:
  // Written once before creation_failed_ is set, never after: readers that
  // saw the flag read it without a lock. (There is one writer: the creating
  // call completes once.)
  ErrorInfo creation_error_;
  std::atomic<bool> creation_failed_{false};
};

using RRefStatePtr = std::shared_ptr<RRefState>;

/// The local state behind a Value's RRef, or nullptr for a bare fork.
inline RRefStatePtr state_of(const RRefValue& v) { return std::static_pointer_cast<RRefState>(v.handle); }

}  // namespace castor::detail
