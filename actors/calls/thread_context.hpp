// What the current thread is: a CAF scheduler thread (must never block) or a
// castor executor thread (may block, managed).
#pragma once

#include <chrono>

namespace castor::detail {

/// True on threads started by a CAF actor system (scheduler, middleman).
bool on_caf_thread();

/// Installed into every actor system castor starts (see make_caf_config).
void mark_caf_thread(bool value);

/// How long this thread's next Future wait watches before it sleeps (Note
/// [Waiting for a reply], WR4, in actors/api/future.cpp).
std::chrono::microseconds wait_watch_limit();

}  // namespace castor::detail
