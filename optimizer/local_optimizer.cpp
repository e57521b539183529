// The local optimizer actor and the functions that reach it.
#include "optimizer/local_optimizer.hpp"

#include <deque>
#include <map>
#include <mutex>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "actors/api/current_worker.hpp"
#include "actors/calls/serial_jobs.hpp"
#include "actors/hooks/worker_services.hpp"
#include "engine/context.hpp"
#include "rref/class_registry.hpp"
#include "rref/rref.hpp"

namespace castor::detail {
namespace {

/// One job for the optimizer actor: runs on the executor, one at a time;
/// `reject` fails it when the executor refuses it.
struct OptimJob {
  std::function<void()> run;
  std::function<void()> reject;
};

}  // namespace
}  // namespace castor::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::OptimJob)

namespace castor::detail {
namespace {

using local_optimizer_actor = caf::typed_actor<caf::reacts_to<OptimJob>, caf::reacts_to<released_atom>>;

struct optimizer_state {
  static inline const char* name = "castor.local_optimizer";
  WorkerServices* rt = nullptr;
  SerialJobs<OptimJob> jobs;  // one step or creation at a time, in arrival order
};

using optimizer_pointer = local_optimizer_actor::stateful_pointer<optimizer_state>;

void pump(optimizer_pointer self) {
  auto& st = self->state;
  while (auto job = st.jobs.next()) {
    auto me = caf::actor_cast<local_optimizer_actor>(self);
    if (st.rt->post([run = job->run, me] {
          run();
          caf::anon_send(me, released_atom::value);
        }))
      return;
    st.jobs.finished();  // refused (saturated or stopping): fail it, try the next
    if (job->reject) job->reject();
  }
}

local_optimizer_actor::behavior_type optimizer_behavior(optimizer_pointer self, WorkerServices* rt) {
  self->state.rt = rt;
  return {
      [self](OptimJob& job) {
        self->state.jobs.push(std::move(job));
        pump(self);
      },
      [self](released_atom) {
        self->state.jobs.finished();
        pump(self);
      },
  };
}

/// The optimizers of one worker, by id; touched only by the actor's jobs,
/// which run one at a time. Owned by the worker's runtime (the optimizer
/// layer's OptimizerHooks), which stops its executor -- and so every job --
/// before it lets this go.
struct LocalOptimizers final : OptimizerHooks {
  explicit LocalOptimizers(WorkerServices& rt) : actor(rt.system().spawn(optimizer_behavior, &rt)) {}
  ~LocalOptimizers() override { stop(); }
  void stop() override {
    if (actor) caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    actor = nullptr;
  }
  local_optimizer_actor actor;
  std::map<int64_t, std::pair<std::unique_ptr<torch::optim::Optimizer>, std::vector<at::Tensor>>> optimizers;
  int64_t next_id = 1;
};

LocalOptimizers* local_optimizers(WorkerServices& rt) { return static_cast<LocalOptimizers*>(rt.optimizer()); }

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const optim::Spec& spec, std::vector<at::Tensor> params) {
  namespace to = torch::optim;
  if (auto* s = std::get_if<optim::SGD>(&spec))
    return std::make_unique<to::SGD>(params, to::SGDOptions(s->lr)
                                                 .momentum(s->momentum)
                                                 .dampening(s->dampening)
                                                 .weight_decay(s->weight_decay)
                                                 .nesterov(s->nesterov));
  if (auto* s = std::get_if<optim::Adam>(&spec))
    return std::make_unique<to::Adam>(params, to::AdamOptions(s->lr)
                                                  .betas({s->beta1, s->beta2})
                                                  .eps(s->eps)
                                                  .weight_decay(s->weight_decay)
                                                  .amsgrad(s->amsgrad));
  if (auto* s = std::get_if<optim::AdamW>(&spec))
    return std::make_unique<to::AdamW>(params, to::AdamWOptions(s->lr)
                                                   .betas({s->beta1, s->beta2})
                                                   .eps(s->eps)
                                                   .weight_decay(s->weight_decay)
                                                   .amsgrad(s->amsgrad));
  if (auto* s = std::get_if<optim::Adagrad>(&spec))
    return std::make_unique<to::Adagrad>(params, to::AdagradOptions(s->lr)
                                                     .lr_decay(s->lr_decay)
                                                     .weight_decay(s->weight_decay)
                                                     .initial_accumulator_value(s->initial_accumulator_value)
                                                     .eps(s->eps));
  auto* s = std::get_if<optim::RMSprop>(&spec);
  return std::make_unique<to::RMSprop>(params, to::RMSpropOptions(s->lr)
                                                   .alpha(s->alpha)
                                                   .eps(s->eps)
                                                   .weight_decay(s->weight_decay)
                                                   .momentum(s->momentum)
                                                   .centered(s->centered));
}

void run_step(WorkerServices& rt, LocalOptimizers& lo, int64_t id, int64_t context) {
  auto it = lo.optimizers.find(id);
  if (it == lo.optimizers.end())
    throw LookupError(ErrorInfo{ErrorKind::Lookup, rt.name(), "worker " + rt.name() + " has no optimizer " + std::to_string(id)});
  autograd::GradientMap grads;
  try {
    grads = autograd::get_gradients(rt.worker(), context);
  } catch (const RpcError& e) {
    if (e.kind() != ErrorKind::Lookup) throw;  // this worker never took part: no gradients here
  }
  auto& [opt, params] = it->second;
  // The context's gradients stand in for .grad during the step; .grad itself
  // is put back afterwards.
  std::vector<at::Tensor> saved;
  saved.reserve(params.size());
  for (auto& p : params) {
    saved.push_back(p.grad());
    auto g = grads.find(p);
    p.mutable_grad() = g == grads.end() ? at::Tensor() : g->second;
  }
  opt->step();
  for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = saved[i];
}

// What a job does when the executor refuses it: fail its promise, naming why.
template <class T>
std::function<void()> refused(WorkerServices& rt, Promise<T> p) {
  auto name = rt.name();
  return [p, name] {
    p.try_set_error(ErrorInfo{ErrorKind::Remote, name,
                              "worker " + name + ": the optimizer cannot run: the executor refused the job "
                              "(saturated or shutting down)"});
  };
}

// Runs `job` as one job of the optimizer actor (one at a time, after the
// jobs before it); the Future gives its result or its error, named `what`.
template <class T>
Future<T> post_job(WorkerServices& rt, std::string what, std::function<T(LocalOptimizers&)> job) {
  auto lo = local_optimizers(rt);
  Promise<T> p(rt.callback_runner());
  auto lo_name = rt.name();
  caf::anon_send(lo->actor, OptimJob{[lo, p, lo_name, what, job = std::move(job)] {
    try {
      p.try_set_value(job(*lo));
    } catch (...) {
      p.try_set_error(error_from_exception(std::current_exception(), lo_name, what));
    }
  }, refused(rt, p)});
  return p.future();
}

torch::optim::Optimizer& optimizer_of(WorkerServices& rt, LocalOptimizers& lo, int64_t id) {
  auto it = lo.optimizers.find(id);
  if (it == lo.optimizers.end())
    throw LookupError(ErrorInfo{ErrorKind::Lookup, rt.name(), "worker " + rt.name() + " has no optimizer " + std::to_string(id)});
  return *it->second.first;
}

}  // namespace

std::unique_ptr<OptimizerHooks> make_local_optimizers(WorkerServices& rt) {
  return std::make_unique<LocalOptimizers>(rt);
}

Future<int64_t> create_local_optimizer(WorkerServices& rt, optim::Spec spec, std::vector<at::Tensor> params) {
  return post_job<int64_t>(rt, "creating an optimizer", [spec = std::move(spec), params = std::move(params)](LocalOptimizers& lo) {
    auto id = lo.next_id++;
    lo.optimizers.emplace(id, std::make_pair(make_optimizer(spec, params), params));
    return id;
  });
}

Future<bool> step_local_optimizer(WorkerServices& rt, int64_t id, int64_t context) {
  auto* rtp = &rt;
  return post_job<bool>(rt, "an optimizer step", [rtp, id, context](LocalOptimizers& lo) {
    run_step(*rtp, lo, id, context);
    return true;
  });
}

// Note [Checkpoint]: an optimizer's state and a set of tensors are saved and
// loaded as jobs of the optimizer actor, so never in the middle of a step
// that another trainer's DistributedOptimizer runs on the same parameters.
Future<int64_t> save_local_optimizer(WorkerServices& rt, int64_t id, std::string path) {
  auto* rtp = &rt;
  return post_job<int64_t>(rt, "saving an optimizer's state", [rtp, id, path](LocalOptimizers& lo) {
    auto& opt = optimizer_of(*rtp, lo, id);
    return write_state_file(path, [&opt](torch::serialize::OutputArchive& a) { opt.save(a); });
  });
}

Future<bool> load_local_optimizer(WorkerServices& rt, int64_t id, std::string path) {
  auto* rtp = &rt;
  return post_job<bool>(rt, "loading an optimizer's state", [rtp, id, path](LocalOptimizers& lo) {
    auto& opt = optimizer_of(*rtp, lo, id);
    read_state_file(path, [&opt](torch::serialize::InputArchive& a) { opt.load(a); });
    return true;
  });
}

Future<int64_t> save_local_tensors(WorkerServices& rt, std::vector<at::Tensor> tensors, std::string path) {
  return post_job<int64_t>(rt, "saving tensors", [tensors = std::move(tensors), path](LocalOptimizers&) {
    return write_state_file(path, [&tensors](torch::serialize::OutputArchive& a) { save_tensors(a, tensors); });
  });
}

Future<bool> load_local_tensors(WorkerServices& rt, std::vector<at::Tensor> tensors, std::string path) {
  return post_job<bool>(rt, "loading tensors", [tensors = std::move(tensors), path](LocalOptimizers&) {
    read_state_file(path, [&tensors](torch::serialize::InputArchive& a) { load_tensors(a, tensors); });
    return true;
  });
}

void register_optimizer_functions() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& reg = FunctionRegistry::instance();
    reg.add(make_function_entry("castor.optim.create", [](Value spec, std::vector<RRef<at::Tensor>> params) {
      auto& w = current_worker();
      std::vector<at::Tensor> tensors;
      for (auto& r : params) tensors.push_back(r.local_value());  // the parameters themselves
      return create_local_optimizer(detail::services(w), optim::spec_from_value(spec), std::move(tensors));
    }));
    reg.add(make_function_entry("castor.optim.step", [](int64_t id, int64_t context) {
      return step_local_optimizer(detail::services(current_worker()), id, context);
    }));
    // Note [Checkpoint]: what Checkpoint asks of an owner.
    reg.add(make_function_entry("castor.ckpt.save_optimizer", [](int64_t id, std::string path) {
      return save_local_optimizer(detail::services(current_worker()), id, std::move(path));
    }));
    reg.add(make_function_entry("castor.ckpt.load_optimizer", [](int64_t id, std::string path) {
      return load_local_optimizer(detail::services(current_worker()), id, std::move(path));
    }));
    reg.add(make_function_entry("castor.ckpt.save_tensors", [](std::vector<RRef<at::Tensor>> owned, std::string path) {
      std::vector<at::Tensor> tensors;
      for (auto& r : owned) tensors.push_back(r.local_value());  // the tensors themselves, not copies
      return save_local_tensors(detail::services(current_worker()), std::move(tensors), std::move(path));
    }));
    reg.add(make_function_entry("castor.ckpt.load_tensors", [](std::vector<RRef<at::Tensor>> owned, std::string path) {
      std::vector<at::Tensor> tensors;
      for (auto& r : owned) tensors.push_back(r.local_value());
      return load_local_tensors(detail::services(current_worker()), std::move(tensors), std::move(path));
    }));
  });
}

}  // namespace castor::detail
