// Mesh<T>: one object of a registered class on each of several workers,
// called as one (Monarch's meshes), with distributed autograd through every
// member: `auto m = w.spawn_mesh<Counter>(workers, 1); m.call(&Counter::add, 2)`.
//
// Note [Mesh]
// ~~~~~~~~~~~
//  M1. A mesh is its members: one RRef<T> per worker, in the order the
//      workers were given, each under the RRef protocol (forks, counts,
//      release when the last copy is gone). Copies of a Mesh share them.
//  M2. call(&T::f, args) calls every member (typed as in Note [Typed
//      handles], H6) and completes with the results in member order; the
//      first failure fails it at once (a dead member's OwnerDiedError names
//      its worker) while the other calls go on. call_one(i, ...) calls one.
//  M3. broadcast(&T::f, args) calls every member and returns nothing; the
//      calls are counted like any other by graceful shutdown. A later call,
//      call_one or broadcast through the same mesh (or a copy) reaches each
//      member after the broadcast's call there has ended, so it sees its
//      effect: delivery order between two workers is not assumed anywhere
//      in castor, so the order is kept here, per member. A broadcast that
//      fails on a member is not reported; the next call to it is.
//  M4. Calls made inside an autograd context record their send and receive
//      functions as any method call does, so backward flows through every
//      member that took part.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "rref/rref.hpp"

namespace castor {

template <class T>
class Mesh {
  template <class M>
  using result_of = detail::call_result_t<typename detail::function_traits<M>::result>;

 public:
  Mesh() = default;
  /// M1: a mesh of existing members.
  explicit Mesh(std::vector<RRef<T>> members) : s_(std::make_shared<Shared>()) {
    s_->members = std::move(members);
    s_->last_broadcast.resize(s_->members.size());
  }

  size_t size() const { return s_ ? s_->members.size() : 0; }
  const std::vector<RRef<T>>& members() const { return shared().members; }
  const RRef<T>& member(size_t i) const {
    check_index(i);
    return shared().members[i];
  }
  /// The members' owners, in member order.
  std::vector<WorkerInfo> workers() const {
    std::vector<WorkerInfo> out;
    for (const auto& m : members()) out.push_back(m.owner());
    return out;
  }

  /// M2: every member's result, in member order.
  template <class M, class... Args>
  auto call(M m, const Args&... args) const {
    using V = result_of<M>;
    std::vector<Future<V>> each;
    for (size_t i = 0; i < size(); ++i) each.push_back(call_one(i, m, args...));
    return gather<V>(std::move(each));
  }

  /// M2: member `i` only.
  template <class M, class... Args>
  Future<result_of<M>> call_one(size_t i, M m, const Args&... args) const {
    check_index(i);
    auto member = shared().members[i];
    return after_broadcast(i, [member, m, args...]() { return member.rpc_async(m, args...); });
  }

  /// M3: every member, no results.
  template <class M, class... Args>
  void broadcast(M m, const Args&... args) const {
    for (size_t i = 0; i < size(); ++i) {
      auto done = call_one(i, m, args...).then([](Future<result_of<M>>&) {});  // ends, whatever the outcome
      std::lock_guard<std::mutex> lock(shared().mutex);
      shared().last_broadcast[i] = done;
    }
  }

 private:
  struct Shared {
    std::vector<RRef<T>> members;
    std::mutex mutex;
    std::vector<Future<void>> last_broadcast;  // M3: per member, the last broadcast's end
  };

  Shared& shared() const {
    if (!s_) throw LookupError(ErrorInfo{ErrorKind::Lookup, "", "use of an empty castor::Mesh"});
    return *s_;
  }
  void check_index(size_t i) const {
    if (i >= size())
      throw LookupError(ErrorInfo{ErrorKind::Lookup, "",
                                  "mesh member " + std::to_string(i) + " does not exist: the mesh has " +
                                      std::to_string(size()) + " member(s)"});
  }

  // M3: sends once member i's last broadcast has ended.
  template <class Send>
  auto after_broadcast(size_t i, Send send) const -> decltype(send()) {
    Future<void> prior;
    {
      std::lock_guard<std::mutex> lock(shared().mutex);
      prior = shared().last_broadcast[i];
    }
    if (!prior.valid() || prior.is_done()) return send();
    return prior.then([send](Future<void>&) mutable { return send(); });  // flattened by then()
  }

  // M2: all values in order, or the first error.
  template <class V>
  static Future<std::conditional_t<std::is_void<V>::value, void, std::vector<V>>> gather(std::vector<Future<V>> each) {
    using Out = std::conditional_t<std::is_void<V>::value, void, std::vector<V>>;
    Promise<Out> all;
    if (each.empty()) {
      if constexpr (std::is_void<V>::value)
        all.set_value();
      else
        all.set_value({});
      return all.future();
    }
    auto left = std::make_shared<std::atomic<size_t>>(each.size());
    auto held = std::make_shared<std::vector<Future<V>>>(each);
    for (auto& f : each)
      f.on_complete([left, held, all, f] {
        if (auto e = f.state()->error()) {
          all.try_set_error(std::move(*e));
          return;
        }
        if (left->fetch_sub(1) != 1) return;
        if constexpr (std::is_void<V>::value) {
          all.try_set_value();
        } else {
          std::vector<V> out;
          out.reserve(held->size());
          for (const auto& g : *held) out.push_back(g.state()->value_ref());
          all.try_set_value(std::move(out));
        }
      });
    return all.future();
  }

  std::shared_ptr<Shared> s_;
};

// -- Worker::spawn_mesh ------------------------------------------------------

template <class T, class Workers, class... Args>
Mesh<T> Worker::spawn_mesh(const Workers& workers, const Args&... args) const {
  static_assert(detail::constructible_from<T, typename detail::without_timeout<Args...>::type>::value,
                "castor: spawn_mesh<T>(workers, args...) constructs a T on each worker, but T has no constructor "
                "taking these arguments (Note [Typed handles], H5)");
  auto cls = detail::registered_class_or_throw(typeid(T));
  std::vector<RRef<T>> members;
  for (const auto& to : workers) members.push_back(remote<T>(WorkerRef(to), cls, args...));
  return Mesh<T>(std::move(members));
}

}  // namespace castor
