// Worker: init_rpc, the call entry point, worker info, shutdown.
#include "actors/api/worker.hpp"

#include <algorithm>
#include <chrono>
#include <future>
#include <stdexcept>
#include <mutex>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>
#include <caf/logger.hpp>
#include <caf/send.hpp>

#include "actors/transport/bulk/bulk_path.hpp"
#include "actors/transport/caf_config.hpp"
#include "actors/observe/inspector.hpp"
#include "actors/cluster/launcher_watch.hpp"
#include "actors/cluster/rendezvous.hpp"
#include "actors/hooks/layers.hpp"
#include "actors/runtime/runtime.hpp"
#include "actors/calls/thread_context.hpp"
#include "actors/transport/tls.hpp"
#include "actors/transport/transport.hpp"
#include "messages/tensor_wire.hpp"

namespace castor {
namespace {

void set_intra_op_threads(const detail::Runtime& rt) {
  int n = rt.opts.intra_op_threads;
  if (n <= 0) {
    int here = 0;
    for (const auto& w : rt.world().members()) here += w.host == rt.opts.host ? 1 : 0;
    int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    n = std::max(1, cores / std::max(1, here));
  }
  at::set_num_threads(n);
}

// B3 of Note [Shutdown bound]: after a graceful shutdown that ran out of
// time, running user code has this long to return before it is left behind.
constexpr auto kLateCodeGrace = std::chrono::milliseconds(200);

// A runtime whose executor left threads in user code is never freed: they
// still point into it when their code returns. Kept reachable (not leaked)
// so that leak checkers stay quiet.
void park_forever(const std::shared_ptr<detail::Runtime>& rt) {
  static std::mutex mtx;
  static auto* parked = new std::vector<std::shared_ptr<detail::Runtime>>();
  std::lock_guard<std::mutex> lock(mtx);
  parked->push_back(rt);
}

}  // namespace

Worker::Worker(std::shared_ptr<detail::Runtime> rt, bool owning) : rt_(std::move(rt)), owning_(owning) {}

Worker::Worker(Worker&& other) noexcept : rt_(std::move(other.rt_)), owning_(other.owning_) { other.owning_ = false; }

Worker& Worker::operator=(Worker&& other) noexcept {
  if (this != &other) {
    if (owning_ && rt_) {
      try {
        shutdown(true);
      } catch (...) {
      }
    }
    rt_ = std::move(other.rt_);
    owning_ = other.owning_;
    other.owning_ = false;
  }
  return *this;
}

Worker::~Worker() {
  if (!owning_ || !rt_) return;
  try {
    shutdown(true);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "castor[%s]: shutdown in ~Worker failed: %s\n", rt_->name().c_str(), e.what());
  }
}

Worker init_rpc(WorkerOptions opts) {
  detail::watch_launcher();  // Note [Launcher lifeline]: before anything can wait
  opts = detail::resolve_options(std::move(opts));
  detail::check_tls(opts);  // Note [TLS]: bad files are reported before anything starts
  auto& registry = detail::FunctionRegistry::instance();
  if (!registry.problems().empty())
    throw LookupError(ErrorInfo{ErrorKind::Lookup, opts.name, "init_rpc(" + opts.name + "): " + registry.problems().front()});
  auto rt = std::make_shared<detail::Runtime>(opts);
  rt->transport = std::make_unique<detail::Transport>(opts.name, opts.secret, opts.tls, opts.greeting_timeout,
                                                      size_t(opts.world_size));
  detail::note_link_security(opts.name, rt->transport->authenticated(), rt->transport->tls());
  rt->cfg = detail::make_caf_config(rt->opts);
  rt->system = std::make_unique<caf::actor_system>(*rt->cfg);
  rt->view.reset(new Worker(rt, false));
  detail::Executor::Options ex;
  ex.threads = opts.num_worker_threads;
  ex.eager_threads = opts.eager_worker_threads;
  ex.max_threads = opts.max_worker_threads;
  ex.name = opts.name;
  ex.on_thread_start = [view = rt->view.get()] { detail::set_thread_worker(view); };
  rt->executor = std::make_shared<detail::Executor>(std::move(ex));
  {  // first: the layers register functions the join compares
    auto layers = detail::install_layers(rt->services);
    rt->rrefs = std::move(layers.rrefs);
    rt->autograd = std::move(layers.autograd);
    rt->optimizer = std::move(layers.optimizer);
    rt->class_known = std::move(layers.class_known);
  }
  if (opts.bulk_threshold > 0) rt->bulk = std::make_unique<detail::BulkPath>(*rt);  // TLS too: B6
  rt->actor = detail::spawn_worker_actor(*rt);
  try {
    detail::join_world(*rt);
    detail::start_inspection(*rt);
  } catch (...) {
    caf::logger::set_current_actor_system(nullptr);
    rt->state.store(detail::RunState::stopped);
    rt->teardown();
    throw;
  }
  // CAF keeps a reference to the system's logger in a thread-local of every
  // thread that used it; the system's destructor waits for all of them. Drop
  // ours, so that any thread may shut this worker down later.
  caf::logger::set_current_actor_system(nullptr);
  set_intra_op_threads(*rt);
  rt->state.store(detail::RunState::running);
  detail::register_process_worker(rt->view.get());
  return Worker(rt, true);
}

namespace detail {

Runtime& runtime_of(const Worker& w) { return services(w).rt_; }
WorkerServices& services(const Worker& w) { return w.rt_->services; }
CallbackRunner callback_runner(const Worker& w) { return w.rt_->callback_runner(); }

WorkerId rank_of(const Worker& w, const std::string& name) {
  const auto& world = w.rt_->world();
  if (auto r = world.rank_of(name)) return *r;
  std::string known;
  for (const auto& m : world.members()) known += (known.empty() ? "" : ", ") + m.name;
  throw LookupError(ErrorInfo{ErrorKind::Lookup, name, "unknown worker '" + name + "' (known: " + known + ")"});
}

void call_raw(const Worker& w, const std::string& to, const std::string& fn, std::vector<Value> args,
              std::optional<std::chrono::milliseconds> timeout, Completion done) {
  WorkerId rank;
  try {
    rank = rank_of(w, to);
  } catch (const RpcError& e) {
    auto info = e.info();
    info.message += " (calling '" + fn + "')";
    return done(Outcome::failure(std::move(info)));
  }
  CallRequest req;
  req.function = fn;
  if (w.rt_->rrefs) w.rt_->rrefs->convert_arguments(req, args);
  req.args = std::move(args);
  call_request(w, rank, std::move(req), timeout, std::move(done));
}

void call_request(const Worker& w, WorkerId to, CallRequest req, std::optional<std::chrono::milliseconds> timeout,
                  Completion done) {
  auto& rt = *w.rt_;
  auto fail = [&](ErrorKind k, std::string who, std::string msg) {
    done(Outcome::failure(ErrorInfo{k, std::move(who), std::move(msg)}));
  };
  auto st = rt.state.load();
  if (st != RunState::running && st != RunState::shutting_down)
    return fail(ErrorKind::Shutdown, rt.name(),
                "worker " + rt.name() + " is shut down; cannot call '" + req.function + "'");
  for (size_t i = 0; i < req.args.size(); ++i)
    if (auto why = wire::unsendable_reason(req.args[i]))
      return fail(ErrorKind::Type, rt.name(),
                  "argument " + std::to_string(i + 1) + " of '" + req.function + "' cannot be sent: " + *why);
  if (rt.rrefs)
    if (auto why = rt.rrefs->foreign_rref(req.args)) return fail(ErrorKind::Type, rt.name(), *why);
  req.id = rt.call_ids.next();
  req.caller = rt.rank();
  rt.start_call(to, std::move(req), timeout.value_or(rt.opts.rpc_timeout), std::move(done));
}

}  // namespace detail

std::map<std::string, int64_t> Worker::autograd_debug_info() const {
  if (!rt_ || !rt_->autograd) return {};
  return rt_->autograd->debug_info();
}

std::map<std::string, int64_t> Worker::rref_debug_info() const {
  if (!rt_ || !rt_->rrefs) return {};
  return rt_->rrefs->debug_info();
}

WorkerInfo Worker::get_worker_info() const { return WorkerInfo{rt_->name(), rt_->rank()}; }

WorkerInfo Worker::get_worker_info(const std::string& name) const {
  auto r = rt_->world().rank_of(name);
  if (!r) throw LookupError(ErrorInfo{ErrorKind::Lookup, name, "unknown worker '" + name + "'"});
  return WorkerInfo{name, *r};
}

WorkerInfo Worker::get_worker_info(int64_t id) const {
  const auto& world = rt_->world();
  if (id < 0 || id > int64_t(INT16_MAX) || !world.has(WorkerId(id)))
    throw LookupError(ErrorInfo{ErrorKind::Lookup, "", "unknown worker id " + std::to_string(id)});
  return WorkerInfo{world.member(WorkerId(id)).name, id};
}

std::string detail::worker_name(const Worker& w, const WorkerRef& to) {
  if (!to.rank()) return to.name();
  auto rank = *to.rank();
  if (rank < 0 || rank >= w.world_size())
    throw LookupError(ErrorInfo{ErrorKind::Lookup, "",
                                "unknown worker: rank " + std::to_string(rank) + " is not in this world of " +
                                    std::to_string(w.world_size()) + " (ranks 0 to " +
                                    std::to_string(w.world_size() - 1) + ")"});
  return w.get_worker_info(rank).name;
}

std::vector<WorkerInfo> Worker::get_worker_infos() const {
  std::vector<WorkerInfo> out;
  for (const auto& m : rt_->world().members()) out.push_back(WorkerInfo{m.name, m.rank});
  return out;
}

const std::string& Worker::name() const { return rt_->name(); }
int Worker::rank() const { return rt_->rank(); }
int Worker::world_size() const { return rt_->opts.world_size; }

bool Worker::is_alive(const std::string& name) const { return rt_->world().alive(detail::rank_of(*this, name)); }

bool Worker::is_alive(int64_t id) const { return rt_->world().alive(WorkerId(get_worker_info(id).id)); }

FailureHandlerId Worker::on_worker_failure(WorkerFailureHandler handler) const {
  if (!handler) throw std::invalid_argument("on_worker_failure: the handler is empty");
  return rt_->services.add_failure_handler(std::move(handler), std::nullopt);
}

bool Worker::remove_failure_handler(FailureHandlerId id) const { return rt_->services.remove_failure_handler(id); }

bool Worker::is_shut_down() const { return !rt_ || rt_->state.load() == detail::RunState::stopped; }

void Worker::shutdown(bool graceful) {
  if (!rt_) return;
  auto& rt = *rt_;
  if (rt.state.load() == detail::RunState::stopped) return;  // idempotent, whichever handle asks
  if (!owning_)
    throw ShutdownError(ErrorInfo{ErrorKind::Shutdown, rt.name(),
                                  "shutdown() needs the Worker returned by init_rpc, not current_worker()"});
  if (detail::Executor::current() == rt.executor.get())
    throw ShutdownError(ErrorInfo{ErrorKind::Shutdown, rt.name(),
                                  "shutdown() cannot run inside one of this worker's own functions: "
                                  "it waits for them to finish"});
  if (detail::on_caf_thread())
    throw ShutdownError(ErrorInfo{ErrorKind::Shutdown, rt.name(), "shutdown() cannot run on a CAF scheduler thread"});
  std::optional<ErrorInfo> error;
  auto began = std::chrono::steady_clock::now();
  if (rt.actor && rt.state.load() != detail::RunState::stopped) {
    auto result = std::make_shared<std::promise<std::optional<ErrorInfo>>>();
    auto answer = result->get_future();
    caf::anon_send(rt.actor, detail::ShutdownCommand{graceful, [result](std::optional<ErrorInfo> e) {
                                                      result->set_value(std::move(e));
                                                    }});
    error = answer.get();
  }
  detail::unregister_process_worker(rt.view.get());
  owning_ = false;
  // B3 of Note [Shutdown bound]: user code gets until the bound (and a short
  // grace after a shutdown that already waited that long), then is left.
  auto now = std::chrono::steady_clock::now();
  auto user_code_deadline = std::max(began + rt.opts.shutdown_timeout, now + kLateCodeGrace);
  rt.teardown(user_code_deadline);  // the runtime stays (stopped) so that later calls fail cleanly
  if (rt.abandoned_threads > 0) park_forever(rt_);
  if (error) throw_rpc_error(std::move(*error));
}

}  // namespace castor
