// TLS for every link of a worker, through CAF's OpenSSL module.
#pragma once

#include <string>

#include "actors/worker_options.hpp"

namespace caf {
class actor_system_config;
}

namespace castor::detail {

/// Loads and cross-checks the TLS files of `opts` with OpenSSL before
/// anything starts: every file readable, the key matching the certificate,
/// the certificate signed by the CA. Throws RpcError naming the worker, the
/// file and the cause. Also refuses a partial setting (see Note [TLS]).
void check_tls(const WorkerOptions& opts);

/// Loads CAF's OpenSSL module with the files of `tls` (when enabled).
void configure_tls(caf::actor_system_config& cfg, const TlsOptions& tls);

/// Without TLS: says once per process that links are unauthenticated.
void note_unauthenticated_links(const std::string& worker);

}  // namespace castor::detail
