// The RRef context actor's state (see Note [RRef protocol] in
// rref_context.hpp), shared by the files that make up its behavior:
// rref_context.cpp (control messages, acks, retries, owners, dead peers),
// adoption.cpp (forks that arrive become local references) and rref/calls/
// (incoming calls that involve RRefs). Private to rref/.
#pragma once

#include <memory>
#include <optional>

#include <caf/stateful_actor.hpp>

#include "rref/calls/prepared_calls.hpp"
#include "rref/owner_rref_actor.hpp"
#include "rref/protocol/fork_table.hpp"
#include "rref/protocol/outbox.hpp"
#include "rref/protocol/owner_directory.hpp"
#include "rref/rref_context.hpp"
#include "rref/rref_counters.hpp"

namespace castor::detail {

class RRefRuntime;
class WorkerServices;

/// A value owned here: what it holds (read by calls on it), its fork count
/// (kept here until a method call spawns its actor, which takes it over:
/// Note [Light owners]), and what inspection reads of it.
struct OwnerSlot {
  std::shared_ptr<Holder> holder;
  std::shared_ptr<OwnerForks> forks;  // null once `actor` keeps it
  std::shared_ptr<OwnerStats> stats;
  owner_rref_actor actor;             // none until the first method call
};

struct context_state {
  static inline const char* name = "castor.rref_context";

  RRefRuntime* rr = nullptr;
  WorkerServices* rt = nullptr;
  std::shared_ptr<RRefCounters> counters;  // the tables' gauges; outlives them

  // The protocol's tables (rules in rref/protocol/): changed only through
  // their methods, by this actor's handlers; made when the actor starts.
  std::optional<ForkTable> forks;  // pending users and pending children (G2)
  std::optional<Outbox> outbox;    // our control messages awaiting an ack
  OwnerDirectory<OwnerSlot> owners;  // values owned here; the ones that ended
  bool retry_scheduled = false;      // a retry_atom is on its way to us

  // Incoming calls waiting for forks to be confirmed or values to arrive.
  PreparedCalls prepared;
};

// An event-based actor that runs where its messages arrive (Note [Actors run
// where their messages arrive]), not a broker on the multiplexer.
using context_pointer = rref_context_actor::stateful_pointer<context_state>;

// -- shared by the context's files (defined in rref_context.cpp) -------------------

/// Sends `c` through the outbox (retried until acknowledged), unless its
/// destination is dead: a dead peer needs no news.
void send_control(context_pointer self, const ControlToSend& c);

/// The owner of `id` here; made if missing and `make` (with `holder` as its
/// value slot, or an empty one), unless it ended. Nothing otherwise.
/// `remade`: RS2 of Note [Restartable values], the value of an earlier life
/// made again here, whose creator's life or death says nothing about it.
OwnerSlot* owner_slot(context_pointer self, RRefId id, bool make, std::shared_ptr<Holder> holder = nullptr,
                      bool remade = false);

/// Hands `e` to the owner of `e.rref` (made if the event may make it), which
/// may end with it (Note [Light owners]). Returns what the value is held in,
/// or nothing if it has no owner (it ended).
std::shared_ptr<Holder> to_owner(context_pointer self, const OwnerEvent& e);

/// L2 of Note [Light owners]: ends the value `id` if its count allows it now
/// (a slot just made for a creator already dead); `slot` is gone then.
bool end_if_done(context_pointer self, RRefId id, OwnerSlot& slot);

/// Note [Light owners]: the actor of the value in `slot` (`id`), spawned now
/// if it has none (a method call needs one).
owner_rref_actor owner_actor(context_pointer self, RRefId id, OwnerSlot& slot);

/// "RRef ... no longer exists here (every fork was deleted)".
ErrorInfo gone_error(context_pointer self, RRefId id);

// -- adoption.cpp --------------------------------------------------------------------

/// Every fork in `v` that arrived here becomes a local reference (the
/// sharing cases of Note [RRef protocol]); a fork still to be confirmed by
/// its owner holds back the prepared call `waiting`, if any.
void adopt_value(context_pointer self, Value& v, PreparedCallId waiting);

// -- reregistration.cpp (Note [Restartable values]) -----------------------------------

/// RS1: worker `rank` rejoined as `incarnation`: every restartable RRef
/// held here whose owner it is re-registers its fork with the new life.
void re_register_all(context_pointer self, WorkerId rank, uint32_t incarnation);
/// RS1, RS4: one holder's re-registration; `parent` (or -1) gets the
/// child_accept once it is answered.
void re_register(context_pointer self, const RRefStatePtr& s, uint32_t incarnation, WorkerId parent);
/// RS1: the answer.
void on_re_registered(context_pointer self, ReRegistered&& r);
/// RS2, RS6: a re-registration arrived here, the owner's new life.
void remake(context_pointer self, CallRequest&& req, Completion reply);

}  // namespace castor::detail
