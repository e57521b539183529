// For castor's own tests and the raw-CAF baseline in bench/ only: the one
// door to a worker's internals (its Runtime, private to actors/ otherwise).
#pragma once

#include "actors/api/worker.hpp"
#include "actors/runtime/runtime.hpp"

namespace castor::testing {

/// The runtime behind `w`.
inline detail::Runtime& runtime(const Worker& w) { return detail::runtime_of(w); }

}  // namespace castor::testing
