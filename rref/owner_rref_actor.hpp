// OwnerRRef actor: one per owned value that has had a method call. It
// keeps the value's fork count (taken over from the RRef context, which
// keeps the count of a value nobody calls methods on: Note [Light owners]),
// runs method calls one at a time (its mailbox is the object's lock, Note
// [Remote objects]), and ends itself when nothing refers to the value any
// more.
#pragma once

#include <functional>
#include <memory>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/fwd.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/api/registry.hpp"
#include "messages/atoms.hpp"
#include "messages/call.hpp"
#include "rref/holder.hpp"
#include "rref/protocol/owner_forks.hpp"
#include "rref/rref_counters.hpp"

namespace castor::detail {

class WorkerServices;

/// A method call on the owned value, with where its result goes.
struct OwnerCall {
  CallRequest request;
  Completion done;                        // the reply (or remote()'s acknowledgement)
  std::shared_ptr<Holder> result_holder;  // remote() of a method: the new value's slot
};

}  // namespace castor::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::OwnerCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::OwnerEvent)

namespace castor::detail {

using owner_rref_actor = caf::typed_actor<
    caf::reacts_to<OwnerEvent>,      // fork accounting, from the RRef context (Note [RRef protocol])
    caf::reacts_to<OwnerCall>,       // a method call
    caf::reacts_to<released_atom>,   // a method returned: the object is free
    caf::reacts_to<ready_atom>>;     // the value was set: queued calls may run

/// Spawns the owner actor of `id`, which takes over its count `forks` from
/// the context; `on_gone` runs (on the owner's thread) when it ends.
/// Spawned by the RRef context `parent` from its handler: it runs where the
/// context runs (Note [Actors run where their messages arrive]).
owner_rref_actor spawn_owner_rref(caf::local_actor* parent, WorkerServices& rt, RRefId id, std::shared_ptr<Holder> holder,
                                  std::shared_ptr<OwnerStats> stats, std::shared_ptr<OwnerForks> forks,
                                  std::function<void()> on_gone);

/// One fork-accounting event on the count `forks` of the value in `holder`,
/// wherever the count is kept (the owner actor, or the context's slot):
/// what a dead peer released, and the value's error if its creator died
/// before creating it.
void apply_owner_event(WorkerServices& rt, OwnerForks& forks, Holder& holder, const OwnerEvent& e);

}  // namespace castor::detail
