// Registers every type castor sends between workers with a CAF config; every
// node must register the same set (CAF 0.17 drops what it cannot name).
#pragma once

#include <caf/fwd.hpp>

namespace castor::detail {

void register_message_types(caf::actor_system_config& cfg);

}  // namespace castor::detail
