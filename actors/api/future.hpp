// Future<T> and Promise<T>: the result of a call, completed once with a value
// or an RpcError. then() callbacks run on executor threads; wait() may block
// any thread but a CAF scheduler thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "actors/api/errors.hpp"

namespace castor {

template <class T>
class Future;
template <class T>
class Promise;

namespace detail {

/// Where then-callbacks run: an executor, or inline when there is none.
using CallbackRunner = std::function<void(std::function<void()>)>;

/// The runner for futures made on this thread (the current worker's executor).
CallbackRunner default_callback_runner();

/// Refuses to block a CAF scheduler thread; registers managed blocking on an
/// executor thread. Implemented in future.cpp.
class WaitGuard {
 public:
  WaitGuard();
  ~WaitGuard();

 private:
  void* scope_;
};

/// The untyped half of a future's shared state.
class FutureCore {
 public:
  explicit FutureCore(CallbackRunner runner) : runner_(std::move(runner)) {}

  bool is_done() const {
    std::lock_guard<std::mutex> lock(mtx_);
    return done_;
  }

  /// Blocks until done (or `timeout` passes: returns false).
  bool wait_done(std::optional<std::chrono::milliseconds> timeout) const {
    if (done_seen_.load(std::memory_order_acquire)) return true;
    return wait_not_done(timeout);
  }

  std::optional<ErrorInfo> error() const {
    std::lock_guard<std::mutex> lock(mtx_);
    return error_;
  }

  /// Runs `cb` once done (at once, through the runner, if already done).
  void add_callback(std::function<void()> cb) {
    {
      std::lock_guard<std::mutex> lock(mtx_);
      if (!done_) {
        callbacks_.push_back(std::move(cb));
        return;
      }
    }
    run(std::move(cb));
  }

  /// Runs `cb` on the completing thread as soon as done (at once if done
  /// already), without the runner: for waits that must wake at once
  /// (wait_all). `cb` must be short and must not block.
  void add_inline_callback(std::function<void()> cb) {
    {
      std::lock_guard<std::mutex> lock(mtx_);
      if (!done_) {
        inline_callbacks_.push_back(std::move(cb));
        return;
      }
    }
    cb();
  }

  /// Runs `cb` once done: on the completing thread itself when that is an
  /// executor thread (it would run a posted `cb` no differently), else
  /// through the runner; at once if done already and this is one. For a
  /// method's returned Future, whose reply `cb` sends (Note [Waiting for a
  /// reply], WR5).
  void add_executor_callback(std::function<void()> cb);

  const CallbackRunner& runner() const { return runner_; }

 protected:
  /// Completes under the lock via `set`; false if already completed.
  template <class F>
  bool complete(F&& set) {
    std::vector<std::function<void()>> cbs, inline_cbs;
    {
      std::lock_guard<std::mutex> lock(mtx_);
      if (done_) return false;
      set();
      done_ = true;
      done_seen_.store(true, std::memory_order_release);
      cbs.swap(callbacks_);
      inline_cbs.swap(inline_callbacks_);
    }
    cv_.notify_all();
    for (auto& cb : inline_cbs) cb();
    for (auto& cb : cbs) run(std::move(cb));
    return true;
  }

  bool complete_error(ErrorInfo e) {
    return complete([&] { error_ = std::move(e); });
  }

  void run(std::function<void()> cb) {
    if (runner_)
      runner_(std::move(cb));
    else
      cb();
  }

  /// Note [Waiting for a reply] (future.cpp): watches `done_seen_` for a
  /// while, then sleeps on `cv_`.
  bool wait_not_done(std::optional<std::chrono::milliseconds> timeout) const;
  bool spin_until_done(std::chrono::microseconds limit) const;

  mutable std::mutex mtx_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  std::atomic<bool> done_seen_{false};  // done_, readable without the lock
  std::optional<ErrorInfo> error_;
  std::vector<std::function<void()>> callbacks_;
  std::vector<std::function<void()>> inline_callbacks_;  // run by complete() itself
  CallbackRunner runner_;

  template <class U>
  friend class castor::Promise;
};

template <class T>
class FutureState : public FutureCore {
 public:
  using FutureCore::FutureCore;

  bool set_value(T v) {
    return complete([&] { value_.emplace(std::move(v)); });
  }
  bool set_error(ErrorInfo e) { return complete_error(std::move(e)); }

  /// Only after done and without error.
  const T& value_ref() const { return *value_; }

 private:
  std::optional<T> value_;
};

template <>
class FutureState<void> : public FutureCore {
 public:
  using FutureCore::FutureCore;
  bool set_value() {
    return complete([] {});
  }
  bool set_error(ErrorInfo e) { return complete_error(std::move(e)); }
};

template <class T>
struct is_future : std::false_type {};
template <class T>
struct is_future<Future<T>> : std::true_type {};

template <class T>
struct unwrap_future {
  using type = T;
};
template <class T>
struct unwrap_future<Future<T>> {
  using type = T;
};

/// The one translation of an exception that user code threw (a callback, a
/// function, method or constructor run for a caller) into the error the
/// caller gets. An RpcError keeps its own error (it names its worker); a
/// CallFailure keeps its kind; anything else is a remote error. With a
/// `worker`, the message says where and what ran: "worker w1: function 'f'
/// raised: <what()>" (`ran` = "function 'f'").
ErrorInfo error_from_exception(std::exception_ptr e, const std::string& worker = "", const std::string& ran = "");

}  // namespace detail

/// The result of an asynchronous call.
template <class T>
class Future {
 public:
  using value_type = T;

  Future() = default;
  explicit Future(std::shared_ptr<detail::FutureState<T>> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  bool is_done() const { return state_->is_done(); }

  /// Blocks until done; returns the value or throws the RpcError.
  T wait() const {
    state_->wait_done(std::nullopt);
    return get();
  }

  /// Like wait(), but throws TimeoutError once `timeout` passes.
  T wait(std::chrono::milliseconds timeout) const {
    if (!state_->wait_done(timeout))
      throw TimeoutError(ErrorInfo{ErrorKind::Timeout, "",
                                   "Future::wait timed out after " + std::to_string(timeout.count()) + " ms"});
    return get();
  }

  /// The value of a completed future (throws its error; refuses if not done).
  T value() const {
    if (!state_->is_done()) throw std::logic_error("castor::Future::value() on a Future that is not complete; call wait()");
    return get();
  }

  /// The error of a completed future, if it failed.
  std::optional<RpcError> error() const {
    auto e = state_->error();
    if (!e) return std::nullopt;
    return RpcError(std::move(*e));
  }

  /// Runs `f` on an executor thread once done. `f` takes this Future (like
  /// PyTorch's then) or the value (errors then skip `f` and propagate). A
  /// Future returned by `f` is flattened. Returns the Future of f's result.
  template <class F>
  auto then(F&& f) const;

  /// Low-level hook: `cb` runs (on the runner) when done.
  void on_complete(std::function<void()> cb) const { state_->add_callback(std::move(cb)); }

  const std::shared_ptr<detail::FutureState<T>>& state() const { return state_; }

 private:
  T get() const {
    if (auto e = state_->error()) throw_rpc_error(std::move(*e));
    if constexpr (!std::is_void<T>::value) return state_->value_ref();
  }

  std::shared_ptr<detail::FutureState<T>> state_;
};

/// Completes a Future later: `p.set_value(v)` or `p.set_error(e)`.
template <class T>
class Promise {
 public:
  Promise() : state_(std::make_shared<detail::FutureState<T>>(detail::default_callback_runner())) {}
  explicit Promise(detail::CallbackRunner runner)
      : state_(std::make_shared<detail::FutureState<T>>(std::move(runner))) {}

  /// The Future this promise completes; may be called more than once.
  Future<T> future() const { return Future<T>(state_); }

  template <class U = T, class = std::enable_if_t<!std::is_void<U>::value>>
  void set_value(U v) const {
    if (!state_->set_value(T(std::move(v)))) throw std::logic_error("castor::Promise completed twice");
  }
  template <class U = T, class = std::enable_if_t<std::is_void<U>::value>>
  void set_value() const {
    if (!state_->set_value()) throw std::logic_error("castor::Promise completed twice");
  }
  void set_error(ErrorInfo e) const {
    if (!state_->set_error(std::move(e))) throw std::logic_error("castor::Promise completed twice");
  }
  void set_error(const RpcError& e) const { set_error(e.info()); }
  /// A plain message: the caller sees it as a RemoteError.
  void set_error(const std::string& message) const { set_error(ErrorInfo{ErrorKind::Remote, "", message}); }
  void set_exception(std::exception_ptr e) const { set_error(detail::error_from_exception(e)); }

  /// Internal completion that tolerates a second completion (e.g. a late reply).
  template <class... U>
  bool try_set_value(U&&... v) const { return state_->set_value(std::forward<U>(v)...); }
  bool try_set_error(ErrorInfo e) const { return state_->set_error(std::move(e)); }

  bool is_done() const { return state_->is_done(); }

 private:
  std::shared_ptr<detail::FutureState<T>> state_;
};

/// A Future that is already complete.
template <class T>
Future<T> make_ready_future(T v) {
  Promise<T> p;
  p.set_value(std::move(v));
  return p.future();
}
inline Future<void> make_ready_future() {
  Promise<void> p;
  p.set_value();
  return p.future();
}

template <class T>
template <class F>
auto Future<T>::then(F&& f) const {
  using Fn = std::decay_t<F>;
  constexpr bool takes_future = std::is_invocable<Fn&, Future<T>&>::value;
  using Raw = typename std::conditional_t<
      takes_future, std::invoke_result<Fn&, Future<T>&>,
      std::conditional_t<std::is_void<T>::value, std::invoke_result<Fn&>, std::invoke_result<Fn&, T>>>::type;
  using R = typename detail::unwrap_future<std::decay_t<Raw>>::type;
  Promise<R> next(state_->runner());
  auto self = *this;
  state_->add_callback([self, next, fn = Fn(std::forward<F>(f))]() mutable {
    try {
      auto invoke = [&]() -> decltype(auto) {
        if constexpr (takes_future) {
          auto copy = self;
          return fn(copy);
        } else if constexpr (std::is_void<T>::value) {
          self.get();
          return fn();
        } else {
          return fn(self.get());
        }
      };
      if constexpr (detail::is_future<std::decay_t<Raw>>::value) {
        auto inner = invoke();
        inner.on_complete([inner, next] {
          if (auto e = inner.state()->error()) {
            next.try_set_error(std::move(*e));
          } else if constexpr (std::is_void<R>::value) {
            next.try_set_value();
          } else {
            next.try_set_value(inner.state()->value_ref());
          }
        });
      } else if constexpr (std::is_void<R>::value) {
        invoke();
        next.try_set_value();
      } else {
        next.try_set_value(invoke());
      }
    } catch (...) {
      next.try_set_error(detail::error_from_exception(std::current_exception()));
    }
  });
  return next.future();
}

namespace detail {
/// Blocks until every future is done, or until the first of them fails:
/// then throws that error at once (the others go on, unwatched).
void wait_all_or_first_error(const std::vector<FutureCore*>& futures);
}  // namespace detail

/// Waits for every future; returns their values in order. Like
/// torch.futures.wait_all, it leaves at the first error to arrive and
/// throws it, without waiting for the futures still running.
template <class T>
auto wait_all(const std::vector<Future<T>>& futures) {
  std::vector<detail::FutureCore*> cores;
  cores.reserve(futures.size());
  for (const auto& f : futures) cores.push_back(f.state().get());
  detail::wait_all_or_first_error(cores);
  if constexpr (std::is_void<T>::value) {
    for (const auto& f : futures) f.value();
  } else {
    std::vector<T> out;
    out.reserve(futures.size());
    for (const auto& f : futures) out.push_back(f.value());
    return out;
  }
}

/// A Future that completes when all of `futures` have completed (with value
/// or error); it holds the futures themselves, like torch.futures.collect_all.
template <class T>
Future<std::vector<Future<T>>> collect_all(std::vector<Future<T>> futures) {
  Promise<std::vector<Future<T>>> all;
  if (futures.empty()) {
    all.set_value({});
    return all.future();
  }
  auto left = std::make_shared<std::atomic<size_t>>(futures.size());
  auto held = std::make_shared<std::vector<Future<T>>>(futures);
  for (auto& f : futures)
    f.state()->add_callback([left, held, all] {
      if (left->fetch_sub(1) == 1) all.try_set_value(*held);
    });
  return all.future();
}

}  // namespace castor
