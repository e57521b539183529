// The app registry and each app's flags.
#include "app.hpp"

namespace castor::apps {

std::map<std::string, App>& app_registry() {
  static std::map<std::string, App> apps;
  return apps;
}

po::options_description declared_flags(const App& app) {
  // No --help among them: castor run takes it (and a cluster file's "args"
  // cannot ask for it).
  po::options_description declared("flags of " + app.name, 100, 50);
  if (app.flags) app.flags(declared);
  return declared;
}

Flags parse_app_flags(const App& app, const std::vector<std::string>& args) {
  auto flags = parse_flags(declared_flags(app), args);
  if (app.check) app.check(flags);  // F5
  return flags;
}

}  // namespace castor::apps
