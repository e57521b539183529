// AutogradRuntime: the engine/ layer's AutogradHooks, the per-worker
// container of autograd contexts, and the ids of contexts and messages.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <deque>
#include <unordered_map>
#include <unordered_set>

#include <caf/send.hpp>

#include "actors/hooks/arrival_runner.hpp"
#include "actors/hooks/autograd_hooks.hpp"
#include "actors/api/worker_options.hpp"
#include "engine/context_actor.hpp"
#include "engine/backward_waiters.hpp"
#include "engine/deadline_board.hpp"

namespace castor::detail {

class WorkerServices;

struct AutogradCounters {
  std::atomic<int64_t> contexts{0};
  std::atomic<int64_t> sends{0};
  std::atomic<int64_t> recvs{0};
  std::atomic<int64_t> graph_tasks{0};
  std::atomic<int64_t> sends_total{0};    // send functions ever attached
  std::atomic<int64_t> lineage_bytes{0};  // bytes of lineage those sends carried
};

class AutogradRuntime : public AutogradHooks {
 public:
  explicit AutogradRuntime(WorkerServices& rt);
  ~AutogradRuntime() override;

  // AutogradHooks
  ContextId current_context() const override;
  ContextId set_current_context(ContextId ctx) override;
  void on_send(ContextId ctx, const std::vector<Value*>& values, WorkerId to, AutogradMeta& meta) override;
  void on_receive(const AutogradMeta& meta, const std::vector<Value*>& values, WorkerId from) override;
  void handle_grad(BackwardGrad&& grad, WorkerId from) override;
  void handle_done(BackwardDone&& done) override;
  void handle_control(ContextControl&& msg) override;
  void on_peer_down(WorkerId rank) override;
  std::optional<std::chrono::steady_clock::time_point> sweep(std::chrono::steady_clock::time_point now) override;
  bool idle() const override;
  void stop() override;
  std::map<std::string, int64_t> debug_info() const override;
  AutogradInspection inspect() const override;

  /// The actor of context `id` here, spawned now if it has none yet (F2 of
  /// Note [Forward inbox]); the context is made first if `create`, unless
  /// it was released. Null if there is no such context.
  context_actor context(ContextId id, bool create);
  /// The gradient store of context `id` here; null if there is none.
  std::shared_ptr<GradientStore> gradients_of(ContextId id) const;
  /// A new context made by this worker (castor::autograd::Context).
  ContextId create_context();
  /// Ends context `id` here (its actor) and forgets it for good.
  void forget(ContextId id);

  WorkerServices& services() { return rt_; }
  AutogradCounters& counters() { return counters_; }
  AutogradMode mode() const;
  /// Graph tasks waiting with a deadline (Note [Graph task watchdog]).
  DeadlineBoard& deadlines() { return deadlines_; }
  /// backward() callers waiting here; failed by stop() (Note [Backward at shutdown]).
  std::shared_ptr<BackwardWaiters> backward_waiters() const { return backward_waiters_; }
  /// A new backward pass id, unique in the world (C4 of Note [FAST mode]).
  uint64_t next_pass_id();
  /// Asks the worker actor for a sweep now (a deadline came sooner).
  void request_sweep();
  /// Delivers a message to one of our actors from this thread (Note [Actors
  /// run where their messages arrive]); after stop(), through CAF's
  /// scheduler (D8).
  template <class Handle, class... Ts>
  void deliver(const Handle& dest, Ts&&... xs) {
    gate_.deliver(&system(), dest, std::forward<Ts>(xs)...);
  }
  IdGenerator<AutogradMessageId> message_ids;

 private:
  WorkerServices& rt_;
  IdGenerator<ContextId> context_ids_;
  AutogradCounters counters_;
  DeadlineBoard deadlines_;
  const std::shared_ptr<BackwardWaiters> backward_waiters_ = std::make_shared<BackwardWaiters>();  // BW2
  std::atomic<uint64_t> passes_{0};
  mutable std::mutex mtx_;
  void handle_join(const ContextControl& msg);  // J1 of Note [Context cleanup]
  // The forward inbox of every context here (Note [Forward inbox]); its
  // actor, once it has one (F2).
  std::shared_ptr<ForwardInbox> inbox(ContextId id);
  std::shared_ptr<ForwardInbox> entry_locked(ContextId id, bool create);
  std::unordered_map<ContextId, std::shared_ptr<ForwardInbox>> inboxes_;
  std::unordered_map<ContextId, context_actor> contexts_;
  std::unordered_map<ContextId, std::shared_ptr<GradientStore>> gradients_;  // Note [Gradient store]
  std::unordered_map<ContextId, std::chrono::steady_clock::time_point> created_;  // inspection
  // Note [Released contexts]: ids of contexts cleaned up here, so that a late
  // message cannot recreate one; the last kMaxReleased, oldest forgotten first.
  static constexpr size_t kMaxReleased = 65536;
  std::unordered_set<ContextId> released_;
  std::deque<ContextId> released_order_;
  caf::actor_system& system();
  // D8: deliveries running on castor's threads; closed once stop() began,
  // and then no context is made either (closed under mtx_ there).
  ArrivalGate gate_;
};

AutogradRuntime& autograd_runtime(WorkerServices& rt);

}  // namespace castor::detail
