// Worker: the public handle of one castor worker: init_rpc joins the world,
// rpc_sync / rpc_async call functions on any worker, shutdown leaves it.
#pragma once

#include <chrono>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/api/current_worker.hpp"
#include "actors/api/errors.hpp"
#include "actors/api/function_handle.hpp"
#include "actors/api/future.hpp"
#include "actors/api/registry.hpp"
#include "actors/api/worker_access.hpp"
#include "actors/api/worker_failure.hpp"
#include "actors/api/worker_options.hpp"
#include "actors/api/worker_ref.hpp"
#include "messages/call.hpp"
#include "messages/struct_traits.hpp"
#include "messages/value.hpp"
#include "messages/value_traits.hpp"

namespace castor {

template <class T>
class RRef;
template <class T>
class Mesh;

namespace detail {
class Runtime;

/// Arguments of a call, converted, and the trailing options if any.
struct PackedArgs {
  std::vector<Value> values;
  std::optional<std::chrono::milliseconds> timeout;
  std::optional<Restart> restart;  // remote() only
};

template <class A>
void pack_one(PackedArgs& out, A&& a) {
  if constexpr (std::is_same<std::decay_t<A>, Timeout>::value)
    out.timeout = a.value;
  else if constexpr (std::is_same<std::decay_t<A>, Restart>::value)
    out.restart = a;
  else
    out.values.push_back(traits_for<A>::to_value(std::forward<A>(a)));
}

template <class... Args>
PackedArgs pack_args(Args&&... args) {
  PackedArgs out;
  out.values.reserve(sizeof...(Args));
  (pack_one(out, std::forward<Args>(args)), ...);
  return out;
}

/// H2 of Note [Typed handles]: a typed call converts each argument to its
/// parameter's type before it travels (an int for a double parameter goes
/// as a double), so what compiled is what the callee accepts.
template <class Params, size_t I, class A>
void pack_typed_one(PackedArgs& out, A&& a) {
  if constexpr (I >= Params::size) {
    pack_one(out, std::forward<A>(a));  // a trailing option (check_arguments let nothing else through)
  } else {
    using P = std::decay_t<std::tuple_element_t<I, typename Params::tuple>>;
    if constexpr (std::is_convertible<A, P>::value)
      out.values.push_back(ValueTraits<P>::to_value(P(std::forward<A>(a))));
    else
      out.values.push_back(traits_for<A>::to_value(std::forward<A>(a)));  // a T for an RRef<T>
  }
}

template <class Params, class... Args, size_t... I>
PackedArgs pack_typed(std::index_sequence<I...>, Args&&... args) {
  PackedArgs out;
  out.values.reserve(sizeof...(Args));
  (pack_typed_one<Params, I>(out, std::forward<Args>(args)), ...);
  return out;
}

template <class Params, class... Args>
PackedArgs pack_typed(Args&&... args) {
  check_arguments<Params, Args...>();
  return pack_typed<Params>(std::index_sequence_for<Args...>{}, std::forward<Args>(args)...);
}

/// Completes `p` from a call's outcome, converting the result to R.
template <class R>
Completion complete_into(Promise<R> p, std::string what) {
  return [p = std::move(p), what = std::move(what)](Outcome o) {
    if (!o.ok) {
      p.try_set_error(std::move(o.error));
      return;
    }
    if constexpr (std::is_void<R>::value) {
      p.try_set_value();
    } else {
      try {
        p.try_set_value(ValueTraits<R>::from_value(std::move(o.value)));
      } catch (const TypeMismatch& m) {
        p.try_set_error(ErrorInfo{ErrorKind::Type, "",
                                  what + " returned " + m.given + m.path + ", expected " + m.expected});
      }
    }
  };
}
template <class T>
struct is_string_like
    : std::integral_constant<bool, std::is_same<std::decay_t<T>, std::string>::value ||
                                       std::is_same<std::decay_t<T>, const char*>::value ||
                                       std::is_same<std::decay_t<T>, char*>::value> {};

/// remote<T>(to, args...) constructs T: T is an object type, not a value
/// castor passes, and the first argument is neither a string nor a handle
/// (those are the older remote<T>(to, "Name", args...)). Note [Typed handles], H5.
template <class T, class... Args>
struct constructs_class : std::false_type {};
template <class T>
struct constructs_class<T> : std::integral_constant<bool, !is_wire_type<T>::value> {};
template <class T, class First, class... Rest>
struct constructs_class<T, First, Rest...>
    : std::integral_constant<bool, !is_wire_type<T>::value && !is_string_like<First>::value &&
                                       !is_callable_handle<First>::value> {};

template <class T, class List>
struct constructible_from;
template <class T, class... A>
struct constructible_from<T, type_list<A...>> : std::is_constructible<T, A...> {};

/// What a typed call's Future holds.
template <class H>
using handle_value_t = call_result_t<typename is_callable_handle<H>::result>;

/// The name of the worker `to` names (a rank is looked up; LookupError if unknown).
std::string worker_name(const Worker& w, const WorkerRef& to);
}  // namespace detail

class Worker {
 public:
  Worker(Worker&& other) noexcept;
  Worker& operator=(Worker&& other) noexcept;
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  /// A Worker that was not shut down shuts down gracefully.
  ~Worker();

  /// Runs `fn` on worker `to` (a name, a rank or a WorkerInfo) and waits
  /// for its result.
  template <class R, class... Args>
  R rpc_sync(const WorkerRef& to, const std::string& fn, Args&&... args) const {
    return rpc_async<R>(to, fn, std::forward<Args>(args)...).wait();
  }

  /// Starts `fn` on worker `to`; the Future completes with its result. A
  /// dropped Future is fire-and-forget: the call still runs.
  template <class R, class... Args>
  Future<R> rpc_async(const WorkerRef& to, const std::string& fn, Args&&... args) const {
    static_assert(!detail::has_restart_v<Args...>, "castor::Restart is an option of remote(), whose value stays on its owner");
    return call_packed<R>(to, fn, detail::pack_args(std::forward<Args>(args)...));
  }

  /// Typed (Note [Typed handles]): `fn` is a CASTOR_FUNCTION handle or a
  /// registered function; the result type is deduced and the arguments are
  /// checked at compile time.
  template <class H, class... Args, std::enable_if_t<detail::is_callable_handle<H>::value, int> = 0>
  detail::handle_value_t<H> rpc_sync(const WorkerRef& to, const H& fn, Args&&... args) const {
    return rpc_async(to, fn, std::forward<Args>(args)...).wait();
  }
  template <class H, class... Args, std::enable_if_t<detail::is_callable_handle<H>::value, int> = 0>
  Future<detail::handle_value_t<H>> rpc_async(const WorkerRef& to, const H& fn, Args&&... args) const {
    static_assert(!detail::has_restart_v<Args...>, "castor::Restart is an option of remote(), whose value stays on its owner");
    return call_packed<detail::handle_value_t<H>>(
        to, detail::handle_name(fn),
        detail::pack_typed<typename detail::is_callable_handle<H>::params>(std::forward<Args>(args)...));
  }

  /// Starts `fn` (a function, an ATen operator, or a registered class name to
  /// construct) on `to`, and returns at once an RRef to the result, which
  /// stays on `to`. Defined in rref/rref.hpp, as are the two below.
  template <class T, class... Args>
  RRef<T> remote(const WorkerRef& to, const std::string& fn, Args&&... args) const;
  /// Typed: `fn` is a handle (Note [Typed handles]).
  template <class H, class... Args, std::enable_if_t<detail::is_callable_handle<H>::value, int> = 0>
  RRef<detail::handle_value_t<H>> remote(const WorkerRef& to, const H& fn, Args&&... args) const;
  /// Constructs an object of the registered class T on `to` (H5 of Note
  /// [Typed handles]); the arguments are checked against T's constructors.
  template <class T, class... Args, std::enable_if_t<detail::constructs_class<T, Args...>::value, int> = 0>
  RRef<T> remote(const WorkerRef& to, Args&&... args) const;

  /// One object of the registered class T on each of `workers` (names,
  /// ranks or WorkerInfos), constructed from `args`, called as one (Note
  /// [Mesh]). Defined in rref/mesh.hpp.
  template <class T, class Workers, class... Args>
  Mesh<T> spawn_mesh(const Workers& workers, const Args&... args) const;
  template <class T, class... Args>
  Mesh<T> spawn_mesh(std::initializer_list<WorkerRef> workers, const Args&... args) const {
    return spawn_mesh<T, std::vector<WorkerRef>, Args...>(std::vector<WorkerRef>(workers), args...);
  }

  /// An RRef to a value owned by this worker. Defined in rref/rref.hpp.
  template <class T>
  RRef<std::decay_t<T>> make_rref(T&& value) const;

  /// PyTorch's keys: num_owner_rrefs, num_pending_futures, num_pending_users,
  /// num_forks; and num_pending_children, num_user_rrefs,
  /// num_unacked_control_messages. Readable after shutdown.
  std::map<std::string, int64_t> rref_debug_info() const;

  /// num_autograd_contexts, num_send_functions, num_recv_functions,
  /// num_running_graph_tasks. Readable after shutdown.
  std::map<std::string, int64_t> autograd_debug_info() const;

  /// This worker's name and id (rank).
  WorkerInfo get_worker_info() const;
  /// Another worker's, by name or by id; throws LookupError if unknown.
  WorkerInfo get_worker_info(const std::string& name) const;
  WorkerInfo get_worker_info(int64_t id) const;
  std::vector<WorkerInfo> get_worker_infos() const;

  const std::string& name() const;
  int rank() const;
  int world_size() const;

  /// False once this worker has found `name` dead (a dead worker stays
  /// dead); throws LookupError if unknown.
  bool is_alive(const std::string& name) const;
  bool is_alive(int64_t id) const;
  bool is_alive(const WorkerInfo& info) const { return is_alive(info.name); }

  /// Supervision (README, "When workers fail"): `handler` runs once for each
  /// worker found dead, also for one already dead when it is registered,
  /// on this worker's executor (it may block and call other workers). It
  /// puts the app in charge: on rank 0, graceful shutdown then ends among
  /// the workers left instead of failing for the dead one. Without a
  /// handler, calls to a dead worker fail and shutdown() throws
  /// UnreachableError. Note [Failure handlers].
  FailureHandlerId on_worker_failure(WorkerFailureHandler handler) const;
  /// Removes a handler of on_worker_failure or RRef::on_owner_failure;
  /// false if it was already removed.
  bool remove_failure_handler(FailureHandlerId id) const;

  /// Graceful: returns when every worker has entered shutdown and all work
  /// everywhere has finished. shutdown(false) stops at once. Throws
  /// UnreachableError if a peer died meanwhile, and TimeoutError, naming
  /// each call still running, if the work did not end within
  /// WorkerOptions::shutdown_timeout of the last worker entering; user code
  /// still running then is left behind so that the process can exit
  /// (Note [Shutdown bound]). Idempotent.
  void shutdown(bool graceful = true);
  bool is_shut_down() const;

 private:
  template <class R>
  Future<R> call_packed(const WorkerRef& to, const std::string& fn, detail::PackedArgs packed) const {
    Promise<R> p(detail::callback_runner(*this));
    auto name = detail::worker_name(*this, to);
    detail::call_raw(*this, name, fn, std::move(packed.values), packed.timeout,
                     detail::complete_into<R>(p, "function '" + fn + "' on worker " + name));
    return p.future();
  }

  friend Worker init_rpc(WorkerOptions opts);
  friend class detail::Runtime;
  // castor's own entry points (actors/api/worker_access.hpp), not user API.
  friend void detail::call_raw(const Worker&, const std::string&, const std::string&, std::vector<Value>,
                               std::optional<std::chrono::milliseconds>, detail::Completion);
  friend void detail::call_request(const Worker&, WorkerId, CallRequest, std::optional<std::chrono::milliseconds>,
                                   detail::Completion);
  friend WorkerId detail::rank_of(const Worker&, const std::string&);
  friend detail::CallbackRunner detail::callback_runner(const Worker&);
  friend detail::WorkerServices& detail::services(const Worker&);
  Worker(std::shared_ptr<detail::Runtime> rt, bool owning);

  std::shared_ptr<detail::Runtime> rt_;
  bool owning_ = false;  // the user's handle; the runtime's own view is not
};

/// Starts this worker and joins the world; returns when every rank joined.
/// Fills unset options from MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE.
Worker init_rpc(WorkerOptions opts);

}  // namespace castor
