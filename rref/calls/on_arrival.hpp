// Calls served on the thread that received them (Note [Values on arrival]):
// a plain remote() starts its function at once, and a fetch of a value that
// the OwnerIndex already holds is answered from its holder; neither waits
// for the RRef context actor.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "messages/call.hpp"
#include "rref/holder.hpp"

namespace castor::detail {

class OwnerIndex;
class WorkerServices;
struct RRefCounters;

// Note [Values on arrival]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// remote() then to_here() is two requests on one link. Both used to wait in
// the RRef context actor's mailbox (then a broker: a wake of the
// multiplexer's thread through its pipe) before the function ran, and the
// fetch then waited in the owner actor's. The link's reader now serves what needs no
// protocol state itself; the context still does the fork accounting, beside
// the call rather than in front of it.
//
//  V1. One holder per value, made in the OwnerIndex (holder_for) by
//      whichever comes first: a remote() started on arrival, the context
//      making the value's owner, or make_rref / remote() to ourselves
//      (register_owner, on the caller's thread). So the value a call
//      computes is the one the owner holds and every fetch reads, in
//      whatever order the reader and the context get to it.
//  V2. A plain remote() (a registered function, builtin or class, no RRef in
//      its arguments, not restartable) starts on arrival; the context gets
//      the request without its arguments and makes the owner, which counts
//      the caller's fork. The acknowledgement ("the owner counted your
//      fork") leaves when both halves are done (CreationJoin), not before:
//      what it means, and graceful shutdown's counting of the request as in
//      flight until then, are as they were.
//  V3. A fetch of a value in the index is answered from its holder: at once
//      if set, else by the thread that sets it. A fetch of a value not in
//      the index yet goes to the context, which makes the owner with the
//      index's holder (V1) should the remote() have started meanwhile.
//  V4. An index entry made by V2 for a value that has ended already (a late
//      or repeated request) is removed by the context, which fails the
//      acknowledgement with the reason; the function has run by then, its
//      result goes nowhere. A value whose creator is already dead is owned
//      and ends at once with its creator's error (L2 of Note [Light owners]).
//      remote()'s creation bound starts when the context counts the fork,
//      a little after the function started.
// Delivery order between workers was never assumed (Note [RRef protocol]);
// V1 is what keeps the holder one when the reader and the context race.

/// V2: the acknowledgement of a remote() started on arrival, sent by the
/// second of its two halves: the value set (any thread) and the fork
/// counted (the context, with the failure that stops it, if any).
class CreationJoin {
 public:
  explicit CreationJoin(Completion ack) : ack_(std::move(ack)) {}
  void value_set() { arrive(); }
  void counted(std::optional<ErrorInfo> failure);

 private:
  void arrive();

  std::atomic<int> left_{2};
  std::optional<ErrorInfo> failure_;  // written by counted() before it arrives
  Completion ack_;
};

/// V2: whether `req` may start on the thread that received it.
bool starts_on_arrival(const CallRequest& req);

/// V2: starts `req` (its arguments moved out; the rest stays for the
/// context) into its value's holder from `index`; `ack` goes out through
/// the join returned, which the context completes.
std::shared_ptr<CreationJoin> start_on_arrival(WorkerServices& rt, OwnerIndex& index, CallRequest& req,
                                               Completion ack);

/// to_here on `holder`, the value `id` owned by worker `owner_name`: `done`
/// gets a copy of the value (or why there is none) once it is set. Counted
/// in `counters->pending_fetches` meanwhile.
void answer_fetch(std::shared_ptr<Holder> holder, RRefId id, std::string owner_name,
                  std::shared_ptr<RRefCounters> counters, Completion done);

}  // namespace castor::detail
