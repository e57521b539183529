// Option helpers: names of modes.
#include "actors/api/worker_options.hpp"

namespace castor {

const char* to_string(AutogradMode m) { return m == AutogradMode::fast ? "fast" : "smart"; }

}  // namespace castor
