// Notes from a worker to its launcher.
//
// Note [Launch notes]
// ~~~~~~~~~~~~~~~~~~~
// A launcher sees how its workers end (an exit code, a signal), not why. On
// a host without rank 0, why matters: a worker that ends because rank 0 died
// must start again with the job, one that failed by itself must not.
//  N1. Under a restart policy the launcher names a file for each worker it
//      starts (CASTOR_LAUNCH_NOTES), empty at each start. The runtime
//      appends one line per fact, "<what> <detail>", with one write(2) on a
//      file opened O_APPEND, so a line is whole even if the process is
//      killed right after. Nothing is written when the variable is unset.
//  N2. A worker other than rank 0 notes `rank0-lost` when it finds rank 0
//      dead before the job's graceful end (rank 0's done), whatever its
//      program then exits with, and when rank 0 stops answering while this
//      worker joins. A worker that already heard rank 0's done notes
//      nothing: the job ended well.
//  N3. A launcher without rank 0 that reads N2's note starts all of its
//      workers again, in their first life (R7 of Note [Restart policy],
//      apps/common/restarts.cpp): rank 0's own launcher restarts the job
//      whole (R3), and they join it again at the cluster file's ports.
#include "actors/cluster/launch_notes.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace castor::detail {

void tell_launcher(const std::string& what, const std::string& detail) {
  const char* path = std::getenv(kLaunchNotesVariable);
  if (!path || !*path) return;
  int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;  // the launcher then sees only the exit code, as without notes
  std::string line = what + " " + detail + "\n";
  // N1: one write, so the line is whole or absent.
  [[maybe_unused]] auto written = ::write(fd, line.data(), line.size());
  ::close(fd);
}

std::optional<std::string> read_launch_note(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(what + " ", 0) == 0) return line.substr(what.size() + 1);
  return std::nullopt;
}

}  // namespace castor::detail
