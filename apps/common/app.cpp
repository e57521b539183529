// App registry and flag parsing.
#include "app.hpp"

#include <algorithm>
#include <stdexcept>

namespace castor::apps {

std::map<std::string, App>& app_registry() {
  static std::map<std::string, App> apps;
  return apps;
}

std::string AppArgs::get(const std::string& key, const std::string& fallback) const {
  auto it = values.find(key);
  return it == values.end() ? fallback : it->second;
}

int64_t AppArgs::get_int(const std::string& key, int64_t fallback) const {
  auto it = values.find(key);
  if (it == values.end()) return fallback;
  try {
    return std::stoll(it->second);
  } catch (...) {
    throw std::invalid_argument("--" + key + " expects an integer, got '" + it->second + "'");
  }
}

double AppArgs::get_double(const std::string& key, double fallback) const {
  auto it = values.find(key);
  if (it == values.end()) return fallback;
  try {
    return std::stod(it->second);
  } catch (...) {
    throw std::invalid_argument("--" + key + " expects a number, got '" + it->second + "'");
  }
}

AppArgs parse_app_args(const std::vector<std::string>& args, const std::vector<std::string>& known) {
  AppArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    if (a.rfind("--", 0) != 0) throw std::invalid_argument("unexpected argument '" + a + "'");
    auto key = a.substr(2);
    std::string value = "true";
    if (auto eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      value = args[++i];
    }
    if (!known.empty() && std::find(known.begin(), known.end(), key) == known.end())
      throw std::invalid_argument("unknown flag --" + key);
    out.values[key] = value;
  }
  return out;
}

}  // namespace castor::apps
