// Two workers of one world in this test process, for app code that needs a
// live Worker but no app run (the stages' binding, owner recovery).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "actors/api/worker_options.hpp"

namespace castor::test {

/// Options of worker `rank` of a world of two whose rank 0 listens on `port`.
inline WorkerOptions in_process(int rank, uint16_t port) {
  WorkerOptions o;
  o.name = "worker" + std::to_string(rank);
  o.rank = rank;
  o.world_size = 2;
  o.master = {"127.0.0.1", port};
  o.host = "127.0.0.1";
  o.init_timeout = std::chrono::seconds(30);
  o.intra_op_threads = 1;
  return o;
}

}  // namespace castor::test
