// Holder: what an OwnerRRef holds: a value, an object of a registered class,
// or the error of the call that was to create it. Set once; owner-side
// handles (local_value, to_here on the owner) read it directly.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "actors/api/errors.hpp"
#include "messages/value.hpp"
#include "rref/class_registry.hpp"

namespace castor::detail {

class Holder {
 public:
  void set_value(Value v);
  void set_object(ObjectPtr object, const ClassEntry* cls);
  void set_error(ErrorInfo e);

  bool is_set() const;
  /// Blocks until set or `timeout` passes (false then). Refuses CAF threads.
  bool wait(std::optional<std::chrono::milliseconds> timeout) const;
  /// Runs `f` once set (at once, on this thread, if already set).
  void on_set(std::function<void()> f);

  /// Note [Restartable values]: the recipe of a value made with
  /// castor::Restart, and its re-creations so far (set before the value).
  void set_recipe(std::shared_ptr<const RestartRecipe> recipe, uint32_t restarts);
  std::pair<std::shared_ptr<const RestartRecipe>, uint32_t> recipe() const;

  // After is_set():
  std::optional<ErrorInfo> error() const;
  const Value& value() const { return value_; }
  ObjectPtr object() const { return object_; }
  const ClassEntry* cls() const { return cls_; }
  bool holds_object() const { return object_ != nullptr; }

 private:
  template <class F>
  void set(F&& assign);

  mutable std::mutex mtx_;
  mutable std::condition_variable cv_;
  bool set_ = false;
  Value value_;
  ObjectPtr object_;
  const ClassEntry* cls_ = nullptr;
  std::optional<ErrorInfo> error_;
  std::vector<std::function<void()>> waiters_;
  std::shared_ptr<const RestartRecipe> recipe_;  // under mtx_
  uint32_t restarts_ = 0;                        // under mtx_
};

/// A use of value `id`, owned by worker `owner`, whose creating call failed
/// with `cause`: "RRef ... owned by worker ... has no value: ...".
ErrorInfo no_value_error(RRefId id, const std::string& owner, const ErrorInfo& cause);

/// The error of a method call on an RRef whose holder holds a value.
ErrorInfo not_an_object_error(RRefId id, const std::string& owner, const std::string& method);

}  // namespace castor::detail
