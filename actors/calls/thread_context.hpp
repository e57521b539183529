// What the current thread is: a CAF scheduler thread (must never block) or a
// castor executor thread (may block, managed).
#pragma once

namespace castor::detail {

/// True on threads started by a CAF actor system (scheduler, middleman).
bool on_caf_thread();

/// Installed into every actor system castor starts (see make_caf_config).
void mark_caf_thread(bool value);

}  // namespace castor::detail
