// The steps a join is made of (rendezvous.cpp), shared with the rejoin of a
// restarted worker (rejoin.cpp).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <caf/scoped_actor.hpp>

#include "actors/api/errors.hpp"
#include "actors/cluster/world.hpp"

namespace castor::detail {

class Runtime;

/// Throws the RpcError of a failed init_rpc, naming the worker.
[[noreturn]] void fail_init(const std::string& who, ErrorKind kind, const std::string& msg);
std::chrono::milliseconds left_until(std::chrono::steady_clock::time_point deadline);

/// Connects to a worker through its door, retrying while nobody listens
/// there yet, until `deadline`; fails init when the door refuses us.
worker_peer connect_with_retry(Runtime& rt, const std::string& host, uint16_t port,
                               std::chrono::steady_clock::time_point deadline, const std::string& what);

/// Hands a connected peer to the worker actor, which says hello to it.
void register_peer(Runtime& rt, caf::scoped_actor& self, WorkerId r, const worker_peer& h, const std::string& name,
                   std::chrono::steady_clock::time_point deadline);

/// Note [World] M1: each a new epoch.
void publish_members(Runtime& rt, std::vector<Member> members);
void publish_handles(Runtime& rt, const std::vector<worker_peer>& handles);

/// From here this worker serves calls (J3 of Note [Masterless join]).
void declare_running(Runtime& rt);

/// Note [Rejoin]: init of a worker past its first life.
void rejoin_world(Runtime& rt, std::chrono::steady_clock::time_point deadline);

}  // namespace castor::detail
