// `castor launch` and `castor worker`: a job deployed from a cluster file.
#pragma once

#include <string>
#include <vector>

#include "actors/api/worker_options.hpp"

namespace castor::apps {

/// castor launch <cluster.json> [--local]: starts the file's workers that
/// live on this host (all of them with --local), each a `castor worker`
/// process with its output prefixed by its name; stops the rest if one fails.
int launch_command(const std::vector<std::string>& args);

/// castor worker --config <cluster.json> --name <worker> [--local]: runs one
/// worker of the file, and its app if the file gives one.
int worker_command(const std::vector<std::string>& args);

/// Joins the world with `opts`, runs app `app` (none: serve) with `args`,
/// then shuts down gracefully. Returns the exit code; prints errors.
int run_app_rank(const std::string& app, const std::vector<std::string>& args, WorkerOptions opts);

}  // namespace castor::apps
