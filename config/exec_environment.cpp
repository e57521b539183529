#include "config/exec_environment.hpp"

#include <cstring>

extern char** environ;

namespace castor::config {

std::vector<std::string> environment_with(const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e; ++e)
    if (const char* eq = std::strchr(*e, '=')) merged.emplace(std::string(*e, size_t(eq - *e)), std::string(eq + 1));
  for (const auto& [k, v] : extra) merged[k] = v;
  std::vector<std::string> out;
  out.reserve(merged.size());
  for (const auto& [k, v] : merged) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace castor::config
