// RRefRuntime: the rref/ layer of one worker, as the worker runtime sees it
// (RRefHooks) and as RRef handles on any thread use it. Thread-safe: each
// entry point either hands its work to the RRef context actor or reads
// state kept for other threads (counters, the inspection indexes).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/hooks/arrival_runner.hpp"
#include "actors/hooks/rref_hooks.hpp"
#include "actors/runtime/fault_injection.hpp"
#include "rref/live_states.hpp"
#include "rref/owner_index.hpp"
#include "rref/rref_context.hpp"
#include "rref/rref_counters.hpp"
#include "rref/rref_state.hpp"

namespace castor::detail {

/// The rref/ layer's RRefHooks: the entry points the worker runtime calls,
/// plus what RRef handles on any thread need.
class RRefRuntime : public RRefHooks {
 public:
  explicit RRefRuntime(WorkerServices& rt);
  ~RRefRuntime() override;

  // RRefHooks
  void fork_for(Value& v, WorkerId to) override;
  void convert_arguments(const CallRequest& req, std::vector<Value>& args) override;
  bool wants(const CallRequest& req) const override;
  std::optional<std::string> foreign_rref(const std::vector<Value>& args) const override;
  void handle_request(CallRequest&& req, caf::strong_actor_ptr reply_to) override;
  void handle_control(RRefControl&& msg) override;
  void handle_ack(RRefControlAck&& ack) override;
  void on_peer_down(WorkerId rank) override;
  void on_peer_rejoined(WorkerId rank, uint32_t incarnation) override;
  void on_shutdown_begin() override;
  bool idle() const override;
  std::map<std::string, int64_t> debug_info() const override;
  RRefInspection inspect() const override;
  void stop() override;

  void adopt_then(Value v, Completion done) override;

  /// Runs `f` on the RRef context once `delay` has passed (not at all if
  /// the context ends first).
  void after(std::chrono::milliseconds delay, std::function<void()> f);

  /// Handles (RRef<T>) on any thread.
  /// `arrived`: the fork this state adopts, whose owner's life and restart
  /// recipe it keeps (Note [Restartable values]).
  RRefStatePtr new_user_state(RRefId id, WorkerId owner, ForkId fork, std::string type_name,
                              const RRefForkData* arrived = nullptr);
  RRefStatePtr new_owner_state(RRefId id, std::shared_ptr<Holder> holder, std::string type_name);
  void register_owner(RRefId id, std::shared_ptr<Holder> holder);
  void state_dropped(RRefState& s);

  /// Hands a message to one of this layer's actors (the context, an owner)
  /// from any thread: one of castor's own runs it there (Note [Actors run
  /// where their messages arrive]), CAF's threads schedule it.
  template <class Handle, class... Ts>
  void deliver(const Handle& dest, Ts&&... xs) {
    gate_.deliver(system_, dest, std::forward<Ts>(xs)...);
  }

  /// The context actor's owners, mirrored for inspection from any thread.
  OwnerIndex& owner_index() { return owner_index_; }
  /// Every handle state alive here (shutdown releases them).
  LiveStates& live_states() { return live_; }
  FaultInjector& faults() { return faults_; }

  WorkerServices& services() { return rt_; }
  RRefCounters& counters() { return *counters_; }
  std::shared_ptr<RRefCounters> counters_ptr() { return counters_; }
  IdGenerator<RRefId> rref_ids;
  IdGenerator<ForkId> fork_ids;

 private:
  WorkerServices& rt_;
  std::shared_ptr<RRefCounters> counters_;
  LiveStates live_;
  OwnerIndex owner_index_;
  FaultInjector faults_;
  rref_context_actor context_;
  // Note [Actors run where their messages arrive]: a message for the context
  // or an owner from one of castor's threads runs it there (D8: counted, for
  // stop()).
  ArrivalGate gate_;
  caf::actor_system* system_;
  template <class... Ts>
  void to_context(Ts&&... xs) {
    deliver(context_, std::forward<Ts>(xs)...);
  }
};

RRefRuntime& rref_runtime(WorkerServices& rt);

/// The RRef layer of the worker that `life` names while it lives (`keep`
/// then holds the worker); null once it is gone.
RRefRuntime* live_rref_runtime(const std::weak_ptr<WorkerServices>& life, std::shared_ptr<WorkerServices>& keep);

/// RRefRuntime::deliver from a thread that may outlive the worker (a task
/// its executor abandoned at stop, E5 of Note [Executor sizing]): through
/// CAF's scheduler once the worker is gone.
template <class Handle, class... Ts>
void deliver_while_alive(const std::weak_ptr<WorkerServices>& life, const Handle& dest, Ts&&... xs) {
  std::shared_ptr<WorkerServices> keep;
  if (auto* rr = live_rref_runtime(life, keep)) return rr->deliver(dest, std::forward<Ts>(xs)...);
  caf::anon_send(dest, std::forward<Ts>(xs)...);
}

}  // namespace castor::detail
