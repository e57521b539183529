// Waiting for a worker that the launcher started again (Note [Restart
// policy], R2) to rejoin the world (Note [Rejoin]): what an app does before
// it builds that worker's objects again.
#pragma once

#include <chrono>
#include <cstdint>

#include "actors/api/worker.hpp"

namespace castor::apps {

/// Waits until worker `rank` is alive again, at most `limit`; false if it
/// is not by then. Polls the world every 20 ms: a rejoin takes hundreds.
bool await_rejoin(Worker& w, int64_t rank, std::chrono::milliseconds limit);

}  // namespace castor::apps
