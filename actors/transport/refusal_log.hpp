// The door's log of refused connections (D5 of Note [The door]): one line
// per refusal, naming the worker, the peer and the cause, without letting a
// scanner flood stderr or grow memory.
#pragma once

#include <string>

namespace castor::detail {

/// Prints "castor[<worker>]: <line>" unless `peer`'s host was refused often
/// already for the same `kind` of refusal (R2: the first three per host and
/// kind, then every hundredth, with the count; past 1024 counts, new hosts
/// share one count per kind); of those, 200 at once and then a line a
/// second in all (R3: how many went unsaid is said with the next line
/// shown). A kind names
/// the port and the cause, so that a new kind of trouble from a noisy host
/// is still said.
void log_refusal(const std::string& worker, const std::string& peer, const std::string& kind, const std::string& line);

}  // namespace castor::detail
