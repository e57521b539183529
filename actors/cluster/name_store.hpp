// The name store: rank 0's rendezvous. Workers join with their name, rank and
// address; when world_size have joined, every joiner gets the whole world.
#pragma once

#include <caf/fwd.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "messages/atoms.hpp"
#include "messages/rendezvous.hpp"

namespace castor::detail {

using name_store_actor = caf::typed_actor<
    caf::replies_to<join_atom, JoinRequest>::with<JoinReply>,
    caf::replies_to<info_atom>::with<std::vector<WorkerRecord>>,
    caf::replies_to<joined_atom, WorkerId>::with<bool>,  // barrier: every rank is connected
    caf::reacts_to<sweep_atom, uint64_t>>;  // a joiner's time is up (local timer)

/// Why `req` does not fit a world whose reference join data (rank 0's, or in
/// a masterless join the checking worker's own) is `reference`, or an empty
/// string: wire version, world size, rank range, autograd mode, signatures.
/// `reference_label` names the reference in the text ("rank 0").
std::string incompatibility(const JoinRequest& reference, const JoinRequest& req, const std::string& reference_label);

/// `reference` is rank 0's own join data: every joiner must match its world
/// size, wire version, autograd mode and registered signatures.
name_store_actor spawn_name_store(caf::actor_system& sys, JoinRequest reference);

}  // namespace castor::detail
