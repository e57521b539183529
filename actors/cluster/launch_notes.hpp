// What a worker tells the launcher that started it, beyond its exit code.
// See Note [Launch notes] in launch_notes.cpp.
#pragma once

#include <optional>
#include <string>

namespace castor::detail {

/// Names the file a launcher under a restart policy gives each worker.
inline constexpr const char* kLaunchNotesVariable = "CASTOR_LAUNCH_NOTES";

/// The first word of N2's note: rank 0 was lost before the job's end.
inline constexpr const char* kRankZeroLost = "rank0-lost";

/// Appends `what` and `detail` as one line to the launcher's notes file (N1);
/// nothing when no launcher asked for notes. Never throws.
void tell_launcher(const std::string& what, const std::string& detail);

/// The detail of the first note `what` in the notes file at `path`, if any.
std::optional<std::string> read_launch_note(const std::string& path, const std::string& what);

}  // namespace castor::detail
