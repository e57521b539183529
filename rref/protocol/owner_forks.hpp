// OwnerForks: the owner's side of Note [RRef protocol] (in
// rref/rref_context.hpp) for one value: which forks exist, which were
// deleted, the local handles, whether the value was created, and so whether
// it may end. Plain data: the RRef context's slot for the value holds one
// and applies the OwnerEvents to it, or the value's OwnerRRef actor once it
// has method calls (Note [Light owners]); unit tests drive it directly.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <unordered_set>

#include "messages/ids.hpp"
#include "rref/protocol/table_gauge.hpp"

namespace castor::detail {

/// One change to the fork accounting of the value `rref`, owned here.
struct OwnerEvent {
  enum class Kind : uint8_t {
    add_fork,   // `worker` holds the new fork `fork` (fork_request, or a fork the owner sends)
    del_fork,   // the fork `fork` is gone (user_delete, G1)
    local_ref,  // a handle on the owner came (+1) or went (-1): `delta`
    created,    // the creating operation arrived; `fork`, if valid, is its caller's fork (remote())
    peer_down,  // worker `worker` died
  };
  Kind kind = Kind::add_fork;
  RRefId rref;
  ForkId fork;
  WorkerId worker = -1;
  int32_t delta = 0;
  // The event came from a peer (or a request), which may arrive before the
  // value is known here (a call can overtake the remote() that creates it):
  // the owner is made if missing, unless it ended (a late message never
  // revives one). Events from this worker's own handles never make one.
  bool may_make_owner = false;

  static OwnerEvent add_fork(RRefId r, ForkId f, WorkerId holder, bool from_peer) {
    return {Kind::add_fork, r, f, holder, 0, from_peer};
  }
  static OwnerEvent del_fork(RRefId r, ForkId f) { return {Kind::del_fork, r, f, -1, 0, true}; }
  static OwnerEvent local_ref(RRefId r, int32_t delta, bool may_make_owner) {
    return {Kind::local_ref, r, ForkId{}, -1, delta, may_make_owner};
  }
  static OwnerEvent created(RRefId r, ForkId caller_fork, WorkerId caller) {
    return {Kind::created, r, caller_fork, caller, 0, true};
  }
  static OwnerEvent peer_down(RRefId r, WorkerId dead) { return {Kind::peer_down, r, ForkId{}, dead, 0, false}; }
};

class OwnerForks {
 public:
  /// `creator` is the worker whose operation creates the value (the rref
  /// id's worker). The gauges (this worker's forks, this value's forks) are
  /// kept equal to the live forks and changed only here.
  OwnerForks(WorkerId creator, TableGauge& worker_forks, TableGauge& value_forks);
  OwnerForks(const OwnerForks&) = delete;
  OwnerForks& operator=(const OwnerForks&) = delete;

  /// What apply() found that the owner must act on.
  enum class Outcome {
    none,
    creator_died,  // the creator died before its request arrived: the value will never be set
  };
  Outcome apply(const OwnerEvent& e);

  /// Idempotent: a fork already counted, or already deleted (a late or
  /// repeated fork_request), is ignored.
  void add_fork(ForkId fork, WorkerId holder);
  /// Idempotent; a delete that overtakes its add cancels it (the fork is
  /// remembered as deleted, so the add is ignored when it arrives).
  void del_fork(ForkId fork);
  void local_ref(int32_t delta) { local_refs_ += delta; }
  /// The creating operation arrived (with its caller's fork, if it has one).
  void created(ForkId caller_fork, WorkerId caller);
  /// A dead worker's forks count as deleted (it will never send their delete).
  Outcome peer_down(WorkerId rank);

  /// G1's end: the value may end once it was created and neither a fork nor
  /// a local handle refers to it. (An owner actor also waits for its
  /// running method calls, Note [Remote objects].)
  bool may_end() const { return created_ && forks_.empty() && local_refs_ <= 0; }

  size_t forks() const { return forks_.size(); }
  bool has_fork(ForkId fork) const { return forks_.count(fork) > 0; }
  int64_t local_refs() const { return local_refs_; }
  bool is_created() const { return created_; }

 private:
  void count(int64_t delta);

  const WorkerId creator_;
  TableGauge& worker_forks_;
  TableGauge& value_forks_;
  // Live forks and the worker holding each: add_fork adds, del_fork and
  // peer_down remove (the gauges change with them, in count()).
  std::unordered_map<ForkId, WorkerId> forks_;
  // Forks known deleted: del_fork and peer_down add, nothing removes (so a
  // late or repeated add_fork is ignored for as long as the owner lives).
  std::unordered_set<ForkId> deleted_;
  int64_t local_refs_ = 0;  // owner-side handles on this worker: local_ref
  bool created_ = false;    // created, or peer_down of the creator: until then nothing may end us
};

}  // namespace castor::detail
