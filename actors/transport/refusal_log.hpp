// The door's log of refused connections (D5 of Note [The door]): one line
// per refusal, naming the worker, the peer and the cause, without letting a
// scanner flood stderr or grow memory.
#pragma once

#include <string>

namespace castor::detail {

/// Prints "castor[<worker>]: <line>" unless `peer`'s host was refused often
/// already (R2: the first three per host, then every hundredth, with the
/// count; hosts past the first 1024 share one count).
void log_refusal(const std::string& worker, const std::string& peer, const std::string& line);

}  // namespace castor::detail
