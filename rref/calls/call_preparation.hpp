// Call preparation: the RRef context's handling of an incoming call that
// involves RRefs, up to the moment it may run. Its RRef arguments are
// adopted (forks become local references), RRefs passed where the function
// takes a value are fetched (a fork from another user borrowed, not adopted:
// G3 of Note [RRef protocol]), and the call waits for forks that the owner
// has not confirmed yet; then remote_calls.hpp runs it.
#pragma once

#include <vector>

#include "rref/context_state.hpp"

namespace castor::detail {

/// A request that involves RRefs arrived (RRefHooks::handle_request).
void prepare_call(context_pointer self, IncomingCall&& ic);

/// A value that a prepared call waited for was fetched (or failed).
void on_argument_ready(context_pointer self, ArgumentReady&& r);

/// The owner confirmed a fork that `calls` waited for (ForkTable::acknowledged).
void fork_confirmed_for(context_pointer self, const std::vector<PreparedCallId>& calls);

/// The owner of a fork that `calls` waited for died (ForkTable::peer_down).
/// The owner of RRef arguments of `calls` died (of `rref`, if known): they fail with OwnerDied.
void fork_lost_for(context_pointer self, const std::vector<PreparedCallId>& calls, WorkerId owner, RRefId rref = {});

}  // namespace castor::detail
