// Graceful shutdown: termination detection over all workers, see
// Note [Graceful shutdown] in actors/cluster/shutdown.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "messages/ids.hpp"

namespace castor {

/// One worker's answer to a termination probe.
struct TerminationReport {
  int64_t round = 0;
  WorkerId rank = -1;
  uint64_t sent = 0;      // counted messages this worker sent, ever
  uint64_t received = 0;  // counted messages this worker handled, ever
  bool idle = false;      // no call running, queued or awaiting a reply here
  std::vector<std::string> running;  // requests served here now, described (Note [Shutdown bound])

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, TerminationReport& x) {
    return f(caf::meta::type_name("castor::TerminationReport"), x.round, x.rank, x.sent,
             x.received, x.idle, x.running);
  }
};

}  // namespace castor
