// A launcher test's worker: a /bin/sh script.
#pragma once

#include <string>

#include "apps/common/local_launch.hpp"

namespace castor::test {

inline castor::apps::ProcessSpec shell(const std::string& name, const std::string& script, bool leader = false) {
  castor::apps::ProcessSpec s;
  s.name = name;
  s.argv = {"/bin/sh", "-c", script};
  s.leader = leader;
  return s;
}

}  // namespace castor::test
