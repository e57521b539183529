// Starts a local job again, whole, when a worker dies (castor run and castor
// launch with --max-restarts). See Note [Restart policy] in restarts.cpp.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "apps/common/flags.hpp"
#include "apps/common/local_launch.hpp"

namespace castor::apps {

/// Runs the job `make_specs(restart)` gives (restart: 0 first, then 1, 2,
/// ...) and starts it again after a death, up to `max_restarts` per worker.
/// `command` prefixes its messages ("castor run"). `job_workers`: the whole
/// job's workers, on every host (0: the specs are the whole job). Returns
/// the last run's result, whose exit code is the job's.
LaunchResult run_with_restarts(const std::function<std::vector<ProcessSpec>(int restart)>& make_specs, int max_restarts,
                               const std::string& command, size_t job_workers = 0);

/// Declares --max-restarts N (Note [Flags]).
void declare_max_restarts(po::options_description& flags);

/// --max-restarts, checked (0 when not given). Throws std::invalid_argument.
int max_restarts_from(const Flags& flags);

}  // namespace castor::apps
