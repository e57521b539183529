// The apps `castor run` knows: each is a function every worker process runs
// after joining the world; rank 0 usually drives.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "actors/api/worker.hpp"
#include "apps/common/flags.hpp"

namespace castor::apps {

struct App {
  std::string name;
  std::string summary;
  int default_workers = 3;
  /// Declares every flag the app takes (Note [Flags], F1).
  std::function<void(po::options_description&)> flags;
  std::function<int(Worker&, const Flags&)> run;  // every worker runs this
  /// Note [Flags], F5: the values checked beyond their types; throws
  /// std::invalid_argument naming the flag. Empty: nothing to check.
  std::function<void(const Flags&)> check;
};

/// The app's flags, declared (with --help's text).
po::options_description declared_flags(const App& app);

/// Parses the app's flags and checks their values (Note [Flags], F2, F5);
/// throws std::invalid_argument.
Flags parse_app_flags(const App& app, const std::vector<std::string>& args);

/// Every app, by name (each registers itself with an AppRegistrar).
std::map<std::string, App>& app_registry();

struct AppRegistrar {
  explicit AppRegistrar(App app) { app_registry()[app.name] = std::move(app); }
};

}  // namespace castor::apps
