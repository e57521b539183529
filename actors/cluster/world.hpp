// The world as one worker sees it: who is in it, where they listen, who is
// alive. An immutable snapshot (World) and the one place that holds the
// current one (Membership). See Note [World] in world.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/runtime/worker_actor.hpp"
#include "messages/rendezvous.hpp"

namespace castor::detail {

/// One worker of the world.
struct Member {
  std::string name;
  WorkerId rank = -1;
  std::string host;
  uint16_t port = 0;       // its castor port (its door)
  uint16_t bulk_port = 0;  // Note [Bulk path]; 0: none
  int32_t pid = 0;         // B7: the only process a same-host peer may copy from
  uint32_t incarnation = 1;
  bool alive = true;
  std::chrono::system_clock::time_point died_at{};  // when it was found dead
  worker_peer handle;  // its worker actor once connected; never ours

  static Member from(const WorkerRecord& r);
  WorkerRecord record() const;
};

class World {
 public:
  /// Epoch 0: nobody yet (before the join).
  World() = default;
  World(WorkerId self, uint64_t epoch, std::vector<Member> members);

  uint64_t epoch() const { return epoch_; }
  WorkerId self() const { return self_; }
  const std::string& self_name() const;
  size_t size() const { return members_.size(); }
  const std::vector<Member>& members() const { return members_; }

  /// M3: whether `r` names a worker of this world -- the one bounds check.
  bool has(WorkerId r) const { return r >= 0 && size_t(r) < members_.size(); }
  /// Requires has(r).
  const Member& member(WorkerId r) const { return members_[size_t(r)]; }
  std::optional<WorkerId> rank_of(const std::string& name) const;
  /// "worker1", or "rank 7" for a rank this world does not have.
  std::string name_of(WorkerId r) const;
  /// Ourselves: true. An unknown rank: false.
  bool alive(WorkerId r) const;
  /// A live, connected peer's worker actor; nothing for ourselves, an
  /// unknown or dead rank, or a peer not connected yet.
  std::optional<worker_peer> peer(WorkerId r) const;

  // M1: each of these is a new snapshot with the next epoch.
  World with_members(std::vector<Member> members) const;
  World with_handles(const std::vector<worker_peer>& by_rank) const;
  World with_death(WorkerId r, std::chrono::system_clock::time_point when) const;
  /// Note [Rejoin]: `m` (a higher incarnation of its rank, with its
  /// handle) is alive again.
  World with_rejoin(Member m) const;
  /// Whether any member is past its first life (a rejoin happened).
  bool any_rejoined() const;

 private:
  WorkerId self_ = -1;
  uint64_t epoch_ = 0;
  std::vector<Member> members_;  // by rank
  std::unordered_map<std::string, WorkerId> by_name_;
};

/// Holds the current World for every thread of a worker. Readers take a
/// reference (no lock, no count); writers publish whole new snapshots.
class Membership {
 public:
  Membership();
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  /// The world now. The reference stays valid for the worker's life (M4).
  const World& current() const { return *current_.load(std::memory_order_acquire); }

  /// M2: makes `f(current())` current (its epoch must be the next one),
  /// then runs the change hooks on this thread. Writers are serialised.
  void update(const std::function<World(const World&)>& f);

  /// Called with (before, after) on every change, in registration order.
  using Hook = std::function<void(const World& before, const World& after)>;
  void on_change(Hook hook);

 private:
  mutable std::mutex mtx_;                             // writers and hooks
  std::vector<std::shared_ptr<const World>> history_;  // M4: every snapshot ever current
  std::atomic<const World*> current_{nullptr};
  std::vector<Hook> hooks_;
};

}  // namespace castor::detail
