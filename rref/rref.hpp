// RRef<T>: a reference to a value or object that lives on one worker (its
// owner). Copyable; the last copy on a worker releases that worker's
// reference (see Note [RRef protocol] in rref/rref_context.hpp).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <typeinfo>

#include "actors/api/worker.hpp"
#include "rref/class_registry.hpp"
#include "rref/rref_api.hpp"
#include "rref/rref_state.hpp"

namespace castor {

namespace detail {
template <class T>
std::string type_name_of() {
  if constexpr (is_wire_type<T>::value)
    return ValueTraits<T>::name();
  else
    return class_name_of(typeid(T));
}
}  // namespace detail

template <class T>
class RRef {
 public:
  using value_type = T;
  RRef() = default;
  explicit RRef(detail::RRefStatePtr s) : s_(std::move(s)) {}

  /// The value, fetched from the owner now (no cache). Objects stay on their
  /// owner: call their methods instead.
  T to_here(Timeout timeout = {}) const {
    static_assert(is_wire_type<T>::value,
                  "to_here() copies a value to the caller; an object of a registered class stays on its owner: "
                  "use rref.rpc_sync<R>(\"method\", ...) or local_value() on the owner");
    auto v = detail::fetch_value(state(), limit(timeout));
    try {
      return ValueTraits<T>::from_value(std::move(v));
    } catch (const TypeMismatch& m) {
      throw TypeError(ErrorInfo{ErrorKind::Type, owner_name(),
                                "to_here: RRef holds " + m.given + m.path + ", expected " + m.expected});
    }
  }

  /// On the owner only: the stored object itself (a reference for objects of
  /// registered classes; for values, the value, sharing tensor storage).
  decltype(auto) local_value() const {
    const auto& holder = detail::owned_holder(state());
    if constexpr (is_wire_type<T>::value) {
      return ValueTraits<T>::from_value(Value(holder.value()));
    } else {
      return static_cast<T&>(*static_cast<T*>(holder.object().get()));
    }
  }

  /// Runs method `m` of the object on its owner (one call at a time per object).
  template <class R, class... Args>
  Future<R> rpc_async(const std::string& m, Args&&... args) const {
    auto packed = detail::pack_args(std::forward<Args>(args)...);
    Promise<R> p(detail::runner_of(state()));
    detail::call_method(state(), m, std::move(packed.values), packed.timeout,
                        detail::complete_into<R>(p, "method '" + m + "' on worker " + owner_name()));
    return p.future();
  }
  template <class R, class... Args>
  R rpc_sync(const std::string& m, Args&&... args) const {
    return rpc_async<R>(m, std::forward<Args>(args)...).wait();
  }
  /// Runs method `m` on the owner and keeps its result there, as a new RRef.
  template <class R, class... Args>
  RRef<R> remote(const std::string& m, Args&&... args) const {
    auto packed = detail::pack_args(std::forward<Args>(args)...);
    return RRef<R>(detail::start_remote_method(state(), m, std::move(packed.values), packed.timeout,
                                               detail::type_name_of<R>()));
  }

  WorkerInfo owner() const { return WorkerInfo{state()->owner_name, state()->owner}; }
  const std::string& owner_name() const { return state()->owner_name; }
  bool is_owner() const { return state()->is_owner(); }
  /// Supervision: `handler` runs once if the owner dies (at once if it is
  /// dead already), on this worker's executor; never on the owner itself.
  /// It only notifies (the app is in charge only with a worker-wide handler,
  /// Worker::on_worker_failure). The worker keeps it, not this RRef: remove
  /// it with Worker::remove_failure_handler when done.
  FailureHandlerId on_owner_failure(WorkerFailureHandler handler) const {
    return detail::on_owner_failure(state(), std::move(handler));
  }
  /// Whether the owner knows this worker's fork (always true on the owner).
  bool confirmed_by_owner() const { return state()->confirmed.load(); }
  RRefId id() const { return state()->id; }
  explicit operator bool() const { return s_ != nullptr; }

  const detail::RRefStatePtr& state() const {
    if (!s_) throw LookupError(ErrorInfo{ErrorKind::Lookup, "", "use of an empty castor::RRef"});
    return s_;
  }

 private:
  static std::optional<std::chrono::milliseconds> limit(Timeout t) {
    if (t.value.count() > 0) return t.value;
    return std::nullopt;
  }
  detail::RRefStatePtr s_;
};

template <class T>
struct ValueTraits<RRef<T>> {
  static Value to_value(RRef<T> r) {
    const auto& s = r.state();
    return Value(RRefValue{RRefForkData{s->owner, s->id, ForkId{}, -1, s->type_name}, s});
  }
  static RRef<T> from_value(Value&& v) {
    if (!v.is_rref()) throw TypeMismatch{name(), v.type_name(), ""};
    auto s = detail::state_of(v.to_rref_value());
    if (!s) throw TypeMismatch{name(), "an RRef fork that was not adopted", ""};
    auto want = detail::type_name_of<T>();
    if (s->type_name != want) throw TypeMismatch{name(), "RRef<" + s->type_name + ">", ""};
    return RRef<T>(std::move(s));
  }
  static std::string name() { return "RRef<" + detail::type_name_of<T>() + ">"; }
};

namespace detail {
template <class T>
struct is_rref_param<RRef<T>> : std::true_type {};
}  // namespace detail

// -- Worker's RRef members ------------------------------------------------------

template <class T, class... Args>
RRef<T> Worker::remote(const std::string& to, const std::string& fn, Args&&... args) const {
  auto packed = detail::pack_args(std::forward<Args>(args)...);
  return RRef<T>(detail::start_remote(*this, to, fn, std::move(packed.values), packed.timeout,
                                      detail::type_name_of<T>()));
}

template <class T>
RRef<std::decay_t<T>> Worker::make_rref(T&& value) const {
  using V = std::decay_t<T>;
  static_assert(is_wire_type<V>::value,
                "make_rref takes a value castor can pass (Tensor, numbers, strings, lists...); "
                "construct objects of registered classes with remote<T>(worker, \"T\", ...)");
  return RRef<V>(detail::make_owned_value(*this, ValueTraits<V>::to_value(std::forward<T>(value)),
                                          detail::type_name_of<V>()));
}

}  // namespace castor
