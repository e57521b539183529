// OwnerRRef actor: one per value owned by this worker. Holds the value (or
// the pending slot until the creating call finishes), counts the forks that
// other workers hold and the local handles, answers to_here, runs method
// calls one at a time (its mailbox is the object's lock), and ends itself
// when nothing refers to the value any more. See Note [RRef protocol].
#pragma once

#include <atomic>
#include <chrono>
#include <memory>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/fwd.hpp>
#include <caf/io/typed_broker.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/api/registry.hpp"
#include "messages/atoms.hpp"
#include "messages/call.hpp"
#include "rref/holder.hpp"

namespace castor::detail {

class WorkerServices;

/// A fetch or a method call on the owned value, with where its result goes.
struct OwnerCall {
  CallRequest request;
  Completion done;                        // the reply (or remote()'s acknowledgement)
  std::shared_ptr<Holder> result_holder;  // remote() of a method: the new value's slot
};

}  // namespace castor::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::OwnerCall)

namespace castor::detail {

/// What inspection sees of one owner (castor inspect); the owner actor keeps
/// `forks` equal to its number of live forks.
struct OwnerStats {
  std::atomic<int64_t> forks{0};
  const std::chrono::steady_clock::time_point created = std::chrono::steady_clock::now();
};

using owner_rref_actor = caf::typed_actor<
    caf::reacts_to<add_fork_atom, ForkId, WorkerId>,  // a fork exists (holder worker)
    caf::reacts_to<del_fork_atom, ForkId>,            // a fork is gone
    caf::reacts_to<local_ref_atom, int32_t>,          // owner-side handles here: +1 / -1
    caf::reacts_to<created_atom>,                     // the creating operation is known
    caf::reacts_to<OwnerCall>,                        // to_here or a method call
    caf::reacts_to<released_atom>,                    // a method returned: the object is free
    caf::reacts_to<ready_atom>,                       // the value was set: queued calls may run
    caf::reacts_to<peer_down_atom, WorkerId>>;        // forks held by a dead worker are gone

/// Spawns the owner of `id`; `on_gone` runs (on the owner's thread) when it ends.
owner_rref_actor spawn_owner_rref(WorkerServices& rt, RRefId id, std::shared_ptr<Holder> holder,
                                  std::shared_ptr<OwnerStats> stats, std::function<void()> on_gone);

}  // namespace castor::detail
