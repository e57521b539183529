// Holder: a set-once slot with waiters.
#include "rref/holder.hpp"

#include "actors/api/future.hpp"

namespace castor::detail {

template <class F>
void Holder::set(F&& assign) {
  std::vector<std::function<void()>> run;
  {
    std::lock_guard<std::mutex> lock(mtx_);
    if (set_) return;
    assign();
    set_ = true;
    run.swap(waiters_);
  }
  cv_.notify_all();
  for (auto& f : run) f();
}

void Holder::set_value(Value v) {
  set([&] { value_ = std::move(v); });
}

void Holder::set_object(ObjectPtr object, const ClassEntry* cls) {
  set([&] {
    object_ = std::move(object);
    cls_ = cls;
  });
}

void Holder::set_error(ErrorInfo e) {
  set([&] { error_ = std::move(e); });
}

bool Holder::is_set() const {
  std::lock_guard<std::mutex> lock(mtx_);
  return set_;
}

bool Holder::wait(std::optional<std::chrono::milliseconds> timeout) const {
  if (is_set()) return true;
  // Before our lock: a guard may end the tasks its executor refuses, whose
  // captures may end RRef handles (Note [Actors run where their messages
  // arrive], D9).
  WaitGuard guard;
  std::unique_lock<std::mutex> lock(mtx_);
  if (!timeout) {
    cv_.wait(lock, [&] { return set_; });
    return true;
  }
  return cv_.wait_for(lock, *timeout, [&] { return set_; });
}

void Holder::on_set(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> lock(mtx_);
    if (!set_) {
      waiters_.push_back(std::move(f));
      return;
    }
  }
  f();
}

std::optional<ErrorInfo> Holder::error() const {
  std::lock_guard<std::mutex> lock(mtx_);
  return error_;
}

void Holder::set_recipe(std::shared_ptr<const RestartRecipe> recipe, uint32_t restarts) {
  std::lock_guard<std::mutex> lock(mtx_);
  recipe_ = std::move(recipe);
  restarts_ = restarts;
}

std::pair<std::shared_ptr<const RestartRecipe>, uint32_t> Holder::recipe() const {
  std::lock_guard<std::mutex> lock(mtx_);
  return {recipe_, restarts_};
}

ErrorInfo no_value_error(RRefId id, const std::string& owner, const ErrorInfo& cause) {
  return make_error(cause.kind, owner,
                    "RRef " + to_string(id) + " owned by worker " + owner +
                        " has no value: the call that was to create it failed: " + cause.message);
}

ErrorInfo not_an_object_error(RRefId id, const std::string& owner, const std::string& method) {
  return make_error(ErrorKind::Lookup, owner,
                    "worker " + owner + ": RRef " + to_string(id) + " holds a value, not an object; it has no method '" +
                        method + "'");
}

}  // namespace castor::detail
