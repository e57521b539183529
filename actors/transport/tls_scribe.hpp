// A CAF scribe over a TLS session that castor's door or dialer set up: CAF's
// BASP reads and writes through it like through a plain TCP scribe.
#pragma once

#include <caf/io/scribe.hpp>

#include "actors/transport/tls_session.hpp"

namespace caf::io::network {
class default_multiplexer;
}

namespace castor::detail {

/// Takes `fd` and the established session `ssl` (both owned from here on).
caf::io::scribe_ptr make_tls_scribe(caf::io::network::default_multiplexer& mpx, int fd, SslPtr ssl);

}  // namespace castor::detail
