// RestartPolicy: one holder's side of an RRef made with castor::Restart.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "messages/error_info.hpp"
#include "messages/value.hpp"

namespace castor::detail {

// Note [Restartable values]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// remote(..., castor::Restart{N}) keeps how the value was made, its recipe
// (the function or class, and the arguments), with every RRef to it: forks
// carry it, and owners keep it in the value's Holder. The value dies with
// its owner's life like any other: calls in flight fail with OwnerDiedError,
// and so do uses while the owner is dead. When the owner's next life
// rejoins (Note [Rejoin]):
//
//  RS1. Each holder re-registers its own fork with the new life: a remote()
//       request with the same rref id, the holder's fork, the recipe, and
//       `restarts` = k for the k-th re-creation. Until it is answered (a
//       bound of rpc_timeout), the holder's uses wait for it; after, they go
//       to the new life. Nothing else changes for the user: same RRef, same
//       id, same type.
//  RS2. The new life makes the value from the first such request (runs the
//       recipe), counting that holder's fork with it; a later request for
//       the id only adds its fork. So G1 holds again: the value ends once
//       every re-registered fork is deleted. The request is answered once
//       the fork is counted; a recipe that fails there (a constructor that
//       throws) makes the value an error, which every use then gets.
//  RS3. A holder whose restarts are spent (k > N), or whose re-registration
//       failed, fails every use with OwnerDiedError naming the cause. A use
//       while the owner is dead says whether a restart is still to come.
//  RS4. A fork made before the death but adopted after the rejoin (it was in
//       flight) re-registers itself (RS1) rather than asking the new life to
//       count a fork of a value it may not have yet.
//  RS5. A recipe's arguments hold no RRef (their forks would need a restart
//       of their own) and at most kMaxRecipeBytes of tensors (they travel
//       inline with every fork): remote() refuses others, naming the cause.
//  RS6. A holder that re-registers after the re-created value ended (every
//       other holder let go first) is refused, never served a fresh value
//       under the old id: its uses fail, naming the cause.
//  RS7. A method registered `.idempotent("name")` is the exception to "calls
//       in flight fail": on a restartable object, a call of it that the
//       owner's death cut off, or that comes while the owner is dead with a
//       restart left, waits (bounded by the call's timeout) for this
//       holder's re-registration with the next life and runs there. Its
//       first run may have happened too: idempotent says that is harmless.
//
// Not covered: the recipe runs the constructor again, and a value's
// state from before the death comes back only through castor::Checkpoint
// (restore() after the rejoin, which the app drives); re-registration waits
// for the rejoin notice of each holder, so a use in the moment between the
// owner's world epoch and that notice waits too (bounded, RS1).

inline constexpr int64_t kMaxRecipeBytes = int64_t(1) << 20;

/// Why `args` cannot be a recipe's (RS5), or nothing.
std::optional<std::string> unusable_recipe_args(const std::vector<Value>& args);

class RestartPolicy {
 public:
  using Settled = std::function<void(std::optional<ErrorInfo>)>;

  /// A holder whose fork the owner's life `settled_with` counts (or will:
  /// the creating request, a fork_request), after `restarts` re-creations.
  RestartPolicy(std::shared_ptr<const RestartRecipe> recipe, uint32_t restarts, uint32_t settled_with);

  const std::shared_ptr<const RestartRecipe>& recipe() const { return recipe_; }
  uint32_t max_restarts() const { return recipe_->max_restarts; }
  /// Re-creations of the value this holder took part in (or heard of with its fork).
  uint32_t restarts() const;

  /// The owner's life `incarnation` rejoined. True: re-register now with
  /// restarts() + 1 (RS1). False: the restarts are spent, and every waiting
  /// and later use fails (RS3).
  bool begin(uint32_t incarnation, ErrorInfo if_spent);
  /// The re-registration with life `incarnation` ended; runs the waiting uses.
  void finish(uint32_t incarnation, std::optional<ErrorInfo> failure);
  /// Runs `then` once this holder is settled with life `incarnation`: at
  /// once if it is (nothing: go on; an error: fail), or when finish() comes.
  void when_settled(uint32_t incarnation, Settled then);
  /// The failure that ended the restarts, if any (RS3).
  std::optional<ErrorInfo> failure() const;

 private:
  mutable std::mutex mtx_;
  const std::shared_ptr<const RestartRecipe> recipe_;
  uint32_t restarts_;         // under mtx_
  uint32_t settled_with_;      // under mtx_: the owner's life this holder's fork is counted by
  std::optional<ErrorInfo> failure_;           // under mtx_
  std::vector<std::pair<uint32_t, Settled>> waiting_;  // under mtx_: (life, use)
};

}  // namespace castor::detail
