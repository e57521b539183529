// TLS for every link of a worker, through CAF's OpenSSL module.
#pragma once

#include <cstdint>
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

/// Names the worker listening with TLS on `port` in the log line of a
/// refused handshake (Note [Refused TLS peers], tls_refusals.cpp).
void remember_tls_listener(uint16_t port, const std::string& worker);

/// Without TLS: says once per process that links are unauthenticated.
void note_unauthenticated_links(const std::string& worker);

}  // namespace castor::detail
