// The strings a new process is started with, built before the fork or
// spawn: a forked child of a threaded process may not allocate.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace castor::config {

// This process's environment now with `extra` over it, as "NAME=value"
// sorted by name (of a name set twice, the first: what getenv() finds).
std::vector<std::string> environment_with(const std::map<std::string, std::string>& extra);

// NULL-terminated pointers into `strings`, as execve and posix_spawn take
// them; valid while `strings` is neither changed nor destroyed.
std::vector<char*> c_strings(std::vector<std::string>& strings);

}  // namespace castor::config
