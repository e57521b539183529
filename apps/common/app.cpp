// The app registry and each app's flags.
#include "app.hpp"

namespace castor::apps {

std::map<std::string, App>& app_registry() {
  static std::map<std::string, App> apps;
  return apps;
}

po::options_description declared_flags(const App& app) {
  po::options_description declared("flags of " + app.name, 100, 50);
  declared.add_options()("help,h", "this text");
  if (app.flags) app.flags(declared);
  return declared;
}

Flags parse_app_flags(const App& app, const std::vector<std::string>& args) {
  return parse_flags(declared_flags(app), args);
}

}  // namespace castor::apps
