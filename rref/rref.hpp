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
    static_assert(!detail::has_restart_v<Args...>, "castor::Restart is an option of Worker::remote() only");
    return call_packed<R>(m, detail::pack_args(std::forward<Args>(args)...));
  }
  template <class R, class... Args>
  R rpc_sync(const std::string& m, Args&&... args) const {
    return rpc_async<R>(m, std::forward<Args>(args)...).wait();
  }
  /// Runs method `m` on the owner and keeps its result there, as a new RRef.
  template <class R, class... Args>
  RRef<R> remote(const std::string& m, Args&&... args) const {
    static_assert(!detail::has_restart_v<Args...>, "castor::Restart is an option of Worker::remote() only");
    return remote_packed<R>(m, detail::pack_args(std::forward<Args>(args)...));
  }

  /// Typed (H6 of Note [Typed handles]): method `m` by its member pointer,
  /// `ctr.rpc_sync(&Counter::add, 5)`; arguments checked at compile time.
  template <class M, class... Args, std::enable_if_t<std::is_member_function_pointer<M>::value, int> = 0>
  Future<detail::call_result_t<typename detail::function_traits<M>::result>> rpc_async(M m, Args&&... args) const {
    static_assert(!detail::has_restart_v<Args...>, "castor::Restart is an option of Worker::remote() only");
    check_method<M>();
    return call_packed<detail::call_result_t<typename detail::function_traits<M>::result>>(
        method_name(m), detail::pack_typed<typename detail::function_traits<M>::args>(std::forward<Args>(args)...));
  }
  template <class M, class... Args, std::enable_if_t<std::is_member_function_pointer<M>::value, int> = 0>
  detail::call_result_t<typename detail::function_traits<M>::result> rpc_sync(M m, Args&&... args) const {
    return rpc_async(m, std::forward<Args>(args)...).wait();
  }
  template <class M, class... Args, std::enable_if_t<std::is_member_function_pointer<M>::value, int> = 0>
  RRef<detail::call_result_t<typename detail::function_traits<M>::result>> remote(M m, Args&&... args) const {
    static_assert(!detail::has_restart_v<Args...>, "castor::Restart is an option of Worker::remote() only");
    check_method<M>();
    return remote_packed<detail::call_result_t<typename detail::function_traits<M>::result>>(
        method_name(m), detail::pack_typed<typename detail::function_traits<M>::args>(std::forward<Args>(args)...));
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
  template <class R>
  Future<R> call_packed(const std::string& m, detail::PackedArgs packed) const {
    Promise<R> p(detail::runner_of(state()));
    detail::call_method(state(), m, std::move(packed.values), packed.timeout,
                        detail::complete_into<R>(p, "method '" + m + "' on worker " + owner_name()));
    return p.future();
  }
  template <class R>
  RRef<R> remote_packed(const std::string& m, detail::PackedArgs packed) const {
    return RRef<R>(detail::start_remote_method(state(), m, std::move(packed.values), packed.timeout,
                                               detail::type_name_of<R>()));
  }
  template <class M>
  static constexpr void check_method() {
    static_assert(std::is_base_of<typename detail::function_traits<M>::object, T>::value,
                  "castor: this member pointer is a method of another class than the RRef's (Note [Typed handles], H6)");
  }
  template <class M>
  static std::string method_name(M m) {
    return detail::ClassRegistry::instance().method_name_of(typeid(T), detail::member_pointer_key(m));
  }
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
RRef<T> Worker::remote(const WorkerRef& to, const std::string& fn, Args&&... args) const {
  auto packed = detail::pack_args(std::forward<Args>(args)...);
  return RRef<T>(detail::start_remote(*this, detail::worker_name(*this, to), fn, std::move(packed.values),
                                      packed.timeout, detail::type_name_of<T>(), packed.restart));
}

template <class H, class... Args, std::enable_if_t<detail::is_callable_handle<H>::value, int>>
RRef<detail::handle_value_t<H>> Worker::remote(const WorkerRef& to, const H& fn, Args&&... args) const {
  using V = detail::handle_value_t<H>;
  auto packed = detail::pack_typed<typename detail::is_callable_handle<H>::params>(std::forward<Args>(args)...);
  return RRef<V>(detail::start_remote(*this, detail::worker_name(*this, to),
                                      detail::handle_name(fn), std::move(packed.values), packed.timeout,
                                      detail::type_name_of<V>(), packed.restart));
}

template <class T, class... Args, std::enable_if_t<detail::constructs_class<T, Args...>::value, int>>
RRef<T> Worker::remote(const WorkerRef& to, Args&&... args) const {
  static_assert(detail::constructible_from<T, typename detail::without_timeout<Args...>::type>::value,
                "castor: remote<T>(worker, args...) constructs T, but T has no constructor taking these arguments "
                "(Note [Typed handles], H5)");
  return remote<T>(to, detail::registered_class_or_throw(typeid(T)), std::forward<Args>(args)...);
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
