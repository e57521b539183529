// `castor inspect`: what a running worker holds, read through CAF's
// middleman from the worker's inspector actor.
#pragma once

#include <string>
#include <vector>

namespace castor::apps {

/// castor inspect <host:port | worker> [--config cluster.json] [--json]
/// [--watch] [--interval S] [--count N] [--timeout-ms MS]
int inspect_command(const std::vector<std::string>& args);

/// The human-readable page for one snapshot (JSON text from the inspector).
std::string render_inspection(const std::string& snapshot_json);

}  // namespace castor::apps
