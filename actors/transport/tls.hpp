// TLS on every link of a worker: the checks made before anything starts.
// The sessions themselves are castor's (tls_session.hpp, Note [TLS] in tls.cpp).
#pragma once

#include "actors/api/worker_options.hpp"

namespace castor::detail {

/// Loads and cross-checks the TLS files of `opts` with OpenSSL before
/// anything starts: every file readable, the key matching the certificate,
/// the certificate signed by the CA. Throws RpcError naming the worker, the
/// file and the cause. Also refuses a partial setting (see Note [TLS]).
void check_tls(const WorkerOptions& opts);

}  // namespace castor::detail
