// castor's CAF settings and the hook that marks CAF's threads.
#include "actors/transport/caf_config.hpp"

#include <fstream>

#include <caf/config_value.hpp>
#include <caf/io/middleman.hpp>
#include <caf/thread_hook.hpp>

#include "actors/api/errors.hpp"
#include "actors/calls/thread_context.hpp"
#include "messages/type_registry.hpp"

namespace castor::detail {
namespace {

// Marks CAF's threads so that blocking waits there are refused, not deadlocked.
class CafThreadMarker : public caf::thread_hook {
 public:
  void init(caf::actor_system&) override {}
  void thread_started() override { mark_caf_thread(true); }
  void thread_terminates() override { mark_caf_thread(false); }
};

}  // namespace

std::unique_ptr<caf::actor_system_config> make_caf_config(const WorkerOptions& opts) {
  auto cfg = std::make_unique<caf::actor_system_config>();
  cfg->load<caf::io::middleman>();
  register_message_types(*cfg);
  cfg->add_thread_hook<CafThreadMarker>();
  cfg->set("scheduler.policy", caf::atom("sharing"));
  cfg->set("middleman.workers", size_t{0});
  cfg->set("logger.console", caf::atom("none"));
  if (!opts.caf_config_file.empty()) {
    std::ifstream ini(opts.caf_config_file);
    if (!ini)
      throw RpcError(ErrorInfo{ErrorKind::Lookup, opts.name, "cannot read CAF config file " + opts.caf_config_file});
    if (auto err = cfg->parse(caf::actor_system_config::string_list{}, ini))
      throw RpcError(ErrorInfo{ErrorKind::Lookup, opts.name,
                               "CAF config file " + opts.caf_config_file + ": " + cfg->render(err)});
  }
  for (const auto& [key, text] : opts.caf_settings) {
    auto value = caf::config_value::parse(text);
    // A bare word is a string to the user ("sharing"); CAF wants an atom
    // there, which it accepts from a string setting too.
    if (!value) value = caf::config_value{text};
    cfg->set(key, std::move(*value));
  }
  return cfg;
}

}  // namespace castor::detail
