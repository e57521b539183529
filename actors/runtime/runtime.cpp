// Runtime: construction, teardown order, small shared helpers.
#include "actors/runtime/runtime.hpp"

#include <unistd.h>

#include <cstdio>

#include <caf/send.hpp>

#include "actors/api/current_worker.hpp"
#include "actors/api/worker.hpp"
#include "actors/calls/call_dispatch.hpp"
#include "actors/observe/inspector.hpp"
#include "actors/transport/bulk/bulk_path.hpp"
#include "actors/transport/transport.hpp"
#include "messages/autograd_proto.hpp"
#include "messages/rref_proto.hpp"

namespace castor::detail {

Runtime::Runtime(WorkerOptions o) : opts(std::move(o)) {
  // Note [Incarnation ids]: resolve_options made the incarnation at least 1.
  call_ids.reset(rank(), opts.incarnation);
  transfer_ids.reset(rank(), opts.incarnation);
}

Runtime::~Runtime() { teardown(); }

void Runtime::teardown(std::chrono::steady_clock::time_point user_code_deadline) {
  // Teardown order: nobody new at the door (its thread hands connections to
  // the actor system), no user code left (executor, until its deadline),
  // the reply gate closed, then the actors, then the actor system (which
  // waits for them), then its config. First of all, no bulk link opens any
  // more (B8): a dial in flight would hold a replier (and the gate), then
  // stop(), for its seconds.
  if (bulk) bulk->stop_dialing();
  if (transport) transport->stop();
  if (executor) {
    auto calls = running.snapshot();
    if (auto left = executor->stop_until(user_code_deadline)) {
      abandoned_threads += left;
      std::string what;
      auto now = std::chrono::steady_clock::now();
      for (const auto& c : calls)
        what += (what.empty() ? "" : ", ") + describe_running_call(*this, c, now);
      std::fprintf(stderr, "castor[%s]: %zu thread(s) still in user code at the end of shutdown were left behind%s%s\n",
                   name().c_str(), left, what.empty() ? "" : ": ", what.c_str());
    }
  }
  {
    std::unique_lock<std::shared_mutex> gate(teardown_gate);
    torn_down = true;
  }
  if (bulk) bulk->stop();  // its readers deliver to the actor: stop them first
  if (rrefs) rrefs->stop();
  if (autograd) autograd->stop();
  if (optimizer) optimizer->stop();
  stop_inspection(*this);
  if (actor) caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  actor = nullptr;
  system.reset();
  cfg.reset();
  state.store(RunState::stopped);
  view.reset();  // breaks the cycle runtime -> view -> runtime
}

std::string describe_running_call(const Runtime& rt, const RunningCalls::Entry& call,
                                  std::chrono::steady_clock::time_point now) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f", std::chrono::duration<double>(now - call.since).count());
  return "'" + call.function + "' on " + rt.name() + ", called by " + rt.name_of(call.caller) + ", running for " +
         seconds + " s";
}

bool Runtime::post(Executor::Task task, Executor::Task reject) {
  return executor->post(std::move(task), std::move(reject));
}

CallbackRunner Runtime::callback_runner() const { return executor->runner(); }

JoinRequest make_join_request(const Runtime& rt) {
  JoinRequest req;
  // Once the join listens, the world has our record with the port we got;
  // before (rank 0's name store is made first), rank 0 listens on the
  // master port, which resolve_options made its port.
  const auto& world = rt.world();
  req.self = world.has(rt.rank()) ? world.member(rt.rank()).record()
                                  : WorkerRecord{rt.name(), rt.rank(), rt.opts.host, rt.opts.port,
                                                 uint16_t(rt.bulk ? rt.bulk->port() : 0), int32_t(::getpid()),
                                                 rt.opts.incarnation, true};
  req.world_size = rt.opts.world_size;
  req.autograd_mode = to_string(rt.opts.autograd_mode);
  req.signatures = all_signatures();
  req.timeout_ms = rt.opts.init_timeout.count();
  return req;
}

// -- WorkerServices: the runtime, as the layers above see it ----------------------

const World& WorkerServices::world() const { return rt_.world(); }
WorkerId WorkerServices::rank() const { return rt_.rank(); }
const std::string& WorkerServices::name() const { return rt_.name(); }
const WorkerOptions& WorkerServices::options() const { return rt_.opts; }
bool WorkerServices::running() const { return rt_.state.load() != RunState::stopped; }
caf::actor_system& WorkerServices::system() const { return *rt_.system; }
bool WorkerServices::post(Executor::Task task, Executor::Task reject) const {
  return rt_.post(std::move(task), std::move(reject));
}
bool WorkerServices::run_here(const Executor::Task& task) const {
  if (!rt_.executor || !rt_.executor->accepting()) return false;
  struct ThisWorker {  // current_worker() in `task` is this worker, as on its executor's threads
    Worker* outer;
    explicit ThisWorker(Worker* w) : outer(set_thread_worker(w)) {}
    ~ThisWorker() { set_thread_worker(outer); }
  } scope(&worker());
  task();
  return true;
}
CallbackRunner WorkerServices::callback_runner() const { return rt_.callback_runner(); }
void WorkerServices::start_call(WorkerId to, CallRequest&& req, std::chrono::milliseconds timeout,
                                Completion done) const {
  rt_.start_call(to, std::move(req), timeout, std::move(done));
}
CallId WorkerServices::next_call_id() const { return rt_.call_ids.next(); }
MessageCounters& WorkerServices::counters() const { return rt_.counters; }
void WorkerServices::note_released(WorkerId dead, const std::string& what, int64_t n) const {
  rt_.released.add(dead, what, n);
}
FailureHandlerId WorkerServices::add_failure_handler(WorkerFailureHandler handler,
                                                    std::optional<WorkerId> only) const {
  return rt_.failures.add(std::move(handler), only, rt_.callback_runner());
}
bool WorkerServices::remove_failure_handler(FailureHandlerId id) const { return rt_.failures.remove(id); }
void WorkerServices::request_sweep() const {
  if (rt_.actor) caf::anon_send(rt_.actor, sweep_atom::value);
}
Completion WorkerServices::replier(caf::strong_actor_ptr caller, const CallRequest& req) const {
  return make_replier(&rt_, std::move(caller), req);
}
void WorkerServices::execute(CallRequest&& req, Completion done) const {
  execute_request(&rt_, std::move(req), std::move(done));
}
namespace {
template <class Message>
void send_protocol(Runtime& rt, WorkerId to, Message& msg) {
  if (rt.bulk && rt.bulk->try_send(to, msg)) return;  // B10 of Note [Bulk path]
  if (auto peer = rt.world().peer(to)) caf::anon_send(*peer, std::move(msg));
}
}  // namespace
void WorkerServices::send_to_peer(WorkerId to, BackwardGrad&& msg) const { send_protocol(rt_, to, msg); }
void WorkerServices::send_to_peer(WorkerId to, BackwardDone&& msg) const { send_protocol(rt_, to, msg); }
void WorkerServices::send_to_peer(WorkerId to, ContextControl&& msg) const { send_protocol(rt_, to, msg); }
void WorkerServices::send_to_peer(WorkerId to, RRefControl&& msg) const { send_protocol(rt_, to, msg); }
void WorkerServices::send_to_peer(WorkerId to, RRefControlAck&& msg) const { send_protocol(rt_, to, msg); }
RRefHooks* WorkerServices::rrefs() const { return rt_.rrefs.get(); }
AutogradHooks* WorkerServices::autograd() const { return rt_.autograd.get(); }
OptimizerHooks* WorkerServices::optimizer() const { return rt_.optimizer.get(); }
Worker& WorkerServices::worker() const { return *rt_.view; }
std::weak_ptr<WorkerServices> WorkerServices::lifetime() const {
  // Shares the runtime's life: expires when the last Worker lets it go.
  return std::shared_ptr<WorkerServices>(rt_.shared_from_this(), &rt_.services);
}

}  // namespace castor::detail
