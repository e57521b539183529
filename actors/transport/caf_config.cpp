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

// Note [Silent peers]
// ~~~~~~~~~~~~~~~~~~~
// A worker whose process ends is found dead at once: the kernel closes its
// sockets and CAF's middleman sends down messages for its proxies. A host
// that reboots, loses power or is cut off closes nothing; without a bound
// its peers would wait on it forever (CAF 0.17 ships heartbeats off). So
// castor turns CAF's BASP heartbeats on by default:
//  Q1. Every worker sends a heartbeat on each BASP connection every
//      kDefaultHeartbeatInterval, and drops a connection that has carried
//      nothing for kDefaultConnectionTimeout; its peer is then dead for the
//      rest of the job (M2 of Note [World]), found within the timeout plus
//      one heartbeat interval (CAF checks on each heartbeat tick).
//  Q2. Only a whole BASP message counts as a sign of life: one message of
//      max_message_bytes must cross the slowest link within the timeout
//      (1 GiB in 30 s: about 290 Mbit/s). Slower links want a longer
//      timeout or a smaller max_message_bytes.
//  Q3. A cluster file's options.heartbeat_ms and connection_timeout_ms (0:
//      off), a CAF config file or WorkerOptions::caf_settings override these
//      defaults; every worker of a job must send heartbeats if any drops
//      silent links, which a cluster file's shared options ensure.
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
  // Note [Silent peers]: heartbeats on, so that a peer that vanished
  // without closing its sockets is found dead within a bound.
  cfg->set("middleman.heartbeat-interval", caf::timespan{kDefaultHeartbeatInterval});
  cfg->set("middleman.connection-timeout", caf::timespan{kDefaultConnectionTimeout});
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
