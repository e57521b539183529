// CAF's links behind the door (D1 of Note [The door]): an actor served to
// peers whose connections the door admitted, and a connection to a peer's
// actor made through its door. CAF's middleman itself never listens and
// never connects.
#pragma once

#include <chrono>
#include <set>
#include <string>

#include <caf/actor_control_block.hpp>
#include <caf/fwd.hpp>

#include "actors/transport/dialer.hpp"

namespace castor::detail {

class Door;

/// Serves `whom` (with the interface `sigs`) to every connection the door
/// admits at host:port (0: any free port); returns the port. Throws
/// std::runtime_error when it cannot listen.
uint16_t serve_actor(caf::actor_system& sys, Door& door, const std::string& host, uint16_t port, bool tls,
                     caf::strong_actor_ptr whom, std::set<std::string> sigs);

struct ActorLink {
  caf::strong_actor_ptr actor;
  DialFailure failure = DialFailure::none;
  std::string error;
};

/// Dials host:port, then runs BASP's handshake on the admitted connection
/// and checks that the actor published there speaks `ifs`. Waits at most
/// until `deadline`.
ActorLink connect_actor(caf::actor_system& sys, const DialOptions& dial_opts, const std::string& host, uint16_t port,
                        const std::set<std::string>& ifs, net::Deadline deadline);

}  // namespace castor::detail
