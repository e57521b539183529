// Where castor's protocol actors run: one decision for all of them. See
// Note [Where actors run] below.
#pragma once

#include <utility>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/typed_broker.hpp>
#include <caf/stateful_actor.hpp>

namespace castor::detail {

// Note [Where actors run]
// ~~~~~~~~~~~~~~~~~~~~~~~
// castor's worker actor is a CAF broker, which CAF runs on the middleman's
// multiplexer thread: the thread that reads its messages from CAF's network.
// (The RRef context, the owner RRefs, the autograd contexts and the graph
// tasks, whose messages mostly come on the direct lane or from callers and
// executor threads, run on the thread that delivers them instead: Note
// [Actors run where their messages arrive].) A message from a peer is
// handled there at once, without waking a scheduler thread; on two cores
// that saves two thread hand-offs per message, a sizeable share of a round
// trip.
//  P1 It, and the actors of the Note named above, never block and never
//     run user code: user functions, methods, constructors, custom backward
//     nodes and hooks go to the executor.
//  P2 A message sent to it from another thread (a caller, an executor
//     thread, a bulk reader) wakes the multiplexer through its pipe; that
//     cost is paid once per such message (the lane's calls and replies
//     bypass it: B8 of Note [Bulk path]).
//  P3 A broker is spawned only through spawn_protocol_actor, so that a
//     change of transport or scheduling moves them all at once.

/// The broker type of a typed actor interface: a `Handle` whose
/// implementation runs where Note [Where actors run] says.
template <class List>
struct protocol_broker_of;
template <class... Sigs>
struct protocol_broker_of<caf::detail::type_list<Sigs...>> {
  using type = caf::io::typed_broker<Sigs...>;
};
template <class Handle>
using protocol_broker = typename protocol_broker_of<typename Handle::signatures>::type;

/// Spawns a protocol actor (P3): `fun(self, xs...)` makes its behavior.
template <class F, class... Ts>
auto spawn_protocol_actor(caf::actor_system& sys, F fun, Ts&&... xs) {
  return sys.middleman().spawn_broker(fun, std::forward<Ts>(xs)...);
}

}  // namespace castor::detail
