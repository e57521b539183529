// Inspection of a running worker with CAF's own tools: every worker names
// its actors in CAF's registry ("worker", "inspector"), its inspector answers
// snapshots over the middleman, and an optional HTTP port serves the same
// counters as Prometheus text. `castor inspect` is the client.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <caf/atom.hpp>

#include "actors/api/worker_options.hpp"

namespace castor::detail {

class Runtime;

using inspect_atom = caf::atom_constant<caf::atom("c_inspect")>;
inline constexpr caf::atom_value kWorkerRegistryName = caf::atom("worker");
inline constexpr caf::atom_value kInspectorRegistryName = caf::atom("inspector");

/// Spawns the inspector, names the worker's actors in the registry and, when
/// `rt.opts.metrics_port` is set, serves metrics. Throws RpcError when the
/// metrics port cannot be opened.
void start_inspection(Runtime& rt);

/// Ends what start_inspection started (teardown). Idempotent.
void stop_inspection(Runtime& rt);

}  // namespace castor::detail

namespace castor {

/// Client side of inspection (castor inspect): a connection to one worker.
class InspectionClient {
 public:
  /// Connects to the worker listening at host:port (its castor port)
  /// through its door (Note [The door]) and finds its inspector. `tls`: the
  /// cluster's TLS files, when it uses TLS; `secret`: the cluster secret,
  /// when it has one. Throws RpcError naming the address and the cause.
  InspectionClient(const std::string& host, uint16_t port, const TlsOptions& tls, const std::string& secret,
                   std::chrono::milliseconds timeout);
  ~InspectionClient();
  InspectionClient(const InspectionClient&) = delete;
  InspectionClient& operator=(const InspectionClient&) = delete;

  /// The worker's snapshot as JSON text (see actors/observe/inspection.cpp).
  std::string snapshot();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace castor
