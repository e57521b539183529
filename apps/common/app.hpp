// The apps `castor run` knows: each is a function every worker process runs
// after joining the world; rank 0 usually drives.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "actors/api/worker.hpp"

namespace castor::apps {

/// Flags after the app name, as --key value or --flag.
struct AppArgs {
  std::map<std::string, std::string> values;
  std::string get(const std::string& key, const std::string& fallback) const;
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_double(const std::string& key, double fallback) const;
  bool has(const std::string& key) const { return values.count(key) > 0; }
};

/// Parses `--key value` / `--flag` pairs; throws std::invalid_argument naming
/// an unknown key when `known` is not empty.
AppArgs parse_app_args(const std::vector<std::string>& args, const std::vector<std::string>& known);

struct App {
  std::string name;
  std::string summary;
  std::string flags_help;  // one line per flag
  int default_workers = 3;
  std::vector<std::string> known_flags;
  std::function<int(Worker&, const AppArgs&)> run;  // every worker runs this
};

/// Every app, by name (registered by apps/*/register.cpp through add_app).
std::map<std::string, App>& app_registry();

struct AppRegistrar {
  explicit AppRegistrar(App app) { app_registry()[app.name] = std::move(app); }
};

}  // namespace castor::apps
