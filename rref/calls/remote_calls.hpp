// Remote calls: running an incoming call that involves RRefs once it is
// prepared (call_preparation.hpp). This is call execution, not the RRef
// protocol: a function runs on the executor; remote() of a class constructs
// the object into the new value's slot; a method call goes to the target's
// owner actor (Note [Remote objects]) and to_here reads its holder (Note
// [Light owners]). It lives in rref/ because it needs the owners and the
// class registry, which sit above actors/.
#pragma once

#include "rref/context_state.hpp"

namespace castor::detail {

/// Runs `ic`, whose arguments are local references or values by now; its
/// reply goes to ic.reply_to exactly once.
void dispatch(context_pointer self, IncomingCall&& ic);

/// V2 of Note [Values on arrival]: the context's half of a remote() that
/// started on arrival: its owner is made and counts the caller's fork.
void count_started(context_pointer self, IncomingCall&& ic);

/// remote(): runs the function, or constructs the class, that `req` names
/// into `holder` (its error, if it fails), then calls `ack`.
void make_value(WorkerServices* rt, CallRequest&& req, std::shared_ptr<Holder> holder, Completion ack);

}  // namespace castor::detail
