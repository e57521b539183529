// The CAF configuration every castor worker runs with.
#pragma once

#include <chrono>
#include <memory>

#include <caf/actor_system_config.hpp>

#include "actors/api/worker_options.hpp"

namespace castor::detail {

/// CAF's BASP heartbeats, on by default (Note [Silent peers]).
inline constexpr std::chrono::milliseconds kDefaultHeartbeatInterval{2000};
inline constexpr std::chrono::milliseconds kDefaultConnectionTimeout{30000};

/// castor's defaults (measured on 2 cores: the 'sharing' scheduler and no
/// extra middleman threads halve a round trip), the message types, the
/// thread marker, heartbeats (Note [Silent peers]), then `opts.caf_settings`
/// on top. Throws on a bad setting.
std::unique_ptr<caf::actor_system_config> make_caf_config(const WorkerOptions& opts);

}  // namespace castor::detail
