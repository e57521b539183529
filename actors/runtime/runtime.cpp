// Runtime: construction, teardown order, small shared helpers.
#include "actors/runtime/runtime.hpp"

#include <unistd.h>

#include <caf/send.hpp>

#include "actors/transport/bulk/bulk_path.hpp"
#include "actors/observe/inspector.hpp"
#include "actors/transport/transport.hpp"
#include "actors/api/worker.hpp"

namespace castor::detail {

Runtime::Runtime(WorkerOptions o) : opts(std::move(o)) {}

Runtime::~Runtime() { teardown(); }

void Runtime::teardown() {
  // Teardown order: nobody new at the door (its thread hands connections to
  // the actor system), no user code left (executor), then the actors, then
  // the actor system (which waits for them), then its config.
  if (transport) transport->stop();
  if (executor) executor->stop();
  if (bulk) bulk->stop();  // its readers deliver to the actor: stop them first
  if (rrefs) rrefs->stop();
  if (autograd) autograd->stop();
  stop_inspection(*this);
  if (actor) caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  actor = nullptr;
  {
    std::lock_guard<std::mutex> lock(services_mtx_);
    services_.clear();  // their actors end with the system below
  }
  system.reset();
  cfg.reset();
  state.store(RunState::stopped);
  view.reset();  // breaks the cycle runtime -> view -> runtime
}

std::shared_ptr<void> Runtime::service(const std::string& key, const std::function<std::shared_ptr<void>()>& make) {
  std::lock_guard<std::mutex> lock(services_mtx_);
  auto& slot = services_[key];
  if (!slot) slot = make();
  return slot;
}

std::string Runtime::name_of(WorkerId r) const {
  if (r >= 0 && size_t(r) < world.size()) return world[size_t(r)].name;
  return "rank " + std::to_string(r);
}

bool Runtime::post(Executor::Task task, Executor::Task reject) {
  return executor->post(std::move(task), std::move(reject));
}

CallbackRunner Runtime::callback_runner() const { return executor->runner(); }

JoinRequest make_join_request(const Runtime& rt) {
  JoinRequest req;
  req.self = WorkerRecord{rt.name, rt.rank, rt.opts.host, rt.opts.port, uint16_t(rt.bulk ? rt.bulk->port() : 0),
                          int32_t(::getpid())};
  req.world_size = rt.opts.world_size;
  req.autograd_mode = to_string(rt.opts.autograd_mode);
  req.signatures = all_signatures();
  req.timeout_ms = rt.opts.init_timeout.count();
  return req;
}

}  // namespace castor::detail
