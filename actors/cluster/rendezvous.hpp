// init_rpc's steps: resolve options, listen, join through the name store,
// connect to the peers. Each step throws an RpcError naming what failed.
#pragma once

#include "actors/runtime/runtime.hpp"

namespace castor::detail {

/// Fills unset options from MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and
/// checks them.
WorkerOptions resolve_options(WorkerOptions opts);

/// Publishes the worker actor, joins the world, connects every peer. Returns
/// when every peer is connected.
void join_world(Runtime& rt);

}  // namespace castor::detail
