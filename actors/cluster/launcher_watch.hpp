// A worker ends with the launcher that started it, even when the launcher
// could not say so. See Note [Launcher lifeline] in launcher_watch.cpp.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

namespace castor::detail {

/// LL1: where a launcher names itself to the workers it starts.
inline constexpr const char* kLauncherVariable = "CASTOR_LAUNCHER";

/// When process `pid` started (field 22 of /proc/PID/stat, in clock ticks
/// since boot): with its pid, what names one process for good; 0 when it
/// is gone.
unsigned long long process_start_time(pid_t pid);

/// LL1: the value of kLauncherVariable for a launcher whose grace is
/// `grace`; empty when it cannot name itself (no /proc).
std::string launcher_self_description(std::chrono::milliseconds grace);

/// LL2: starts this process's watch of its launcher, once, when the
/// environment names one; nothing otherwise. When the launcher ends, LL4
/// (a worker: init_rpc), or `on_end` on the watch's thread (LL5: a launcher
/// that a worker started stops its own job). The first call decides. Never
/// throws.
void watch_launcher(void (*on_end)() = nullptr);

}  // namespace castor::detail
