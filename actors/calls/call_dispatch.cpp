// Callee side of a call: look the function up, run it on the executor, send
// the reply straight from the executor thread to the caller's worker actor.
#include "actors/calls/call_dispatch.hpp"

#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/calls/builtins.hpp"
#include "actors/calls/delivery.hpp"
#include "actors/transport/bulk/bulk_path.hpp"
#include "actors/runtime/runtime.hpp"
#include "actors/hooks/rref_hooks.hpp"
#include "actors/runtime/worker_state.hpp"

namespace castor::detail {
namespace {

// Builtins whose tensor inputs are at most this large run on the actor: an
// ATen operator on small tensors takes microseconds, less than the hand-off.
constexpr size_t kInlineBuiltinBytes = 64 * 1024;

bool small_builtin_call(const std::vector<Value>& args) {
  size_t bytes = 0;
  for (const auto& a : args) {
    if (a.is_list()) return false;  // lists of tensors: could be anything
    if (a.is_tensor()) bytes += size_t(a.to_tensor().numel()) * a.to_tensor().element_size();
  }
  return bytes <= kInlineBuiltinBytes;
}

void run_request(Runtime* rt, const FunctionEntry* entry, CallRequest&& req, Completion reply) {
  auto fn = req.function;
  ContextScope scope(rt->autograd.get(), req.autograd.context);  // nested calls join the caller's context
  try {
    if (!entry) {
      reply(Outcome::success(call_builtin(fn, std::move(req.args))));
      return;
    }
    // The Completion may run later (functions returning a Future); it must
    // run exactly once, so exceptions from invoke() after it ran are ignored.
    auto once = std::make_shared<std::atomic<bool>>(false);
    Completion done = [reply, once, rt, fn](Outcome o) {
      if (once->exchange(true)) return;
      if (!o.ok && o.error.worker.empty()) {
        // An error set by user code (Promise::set_error) names no worker yet.
        o.error.worker = rt->name();
        o.error.message = "worker " + rt->name() + ": function '" + fn + "' failed: " + o.error.message;
      }
      reply(std::move(o));
    };
    try {
      entry->invoke(std::move(req.args), done);
    } catch (...) {
      if (!once->load()) throw;
    }
  } catch (...) {
    reply(Outcome::failure(error_from_exception(std::current_exception(), rt->name(), "function '" + fn + "'")));
  }
}

}  // namespace

Completion make_replier(Runtime* rt, caf::strong_actor_ptr caller, const CallRequest& req) {
  bool to_self = req.caller == rt->rank();
  WorkerId caller_rank = req.caller;
  CallId id = req.id;
  ContextId ctx = req.autograd.context;
  auto ticket = rt->running.begin(req.function, req.caller);
  return [rt, caller = std::move(caller), id, to_self, caller_rank, ctx, ticket](Outcome o) {
    rt->running.end(ticket);
    // Note [Shutdown bound]: a reply from user code that outlived teardown
    // goes nowhere; while one is sent, teardown waits here.
    std::shared_lock<std::shared_mutex> gate(rt->teardown_gate);
    if (rt->torn_down) return;
    CallReply reply;
    reply.id = id;
    reply.ok = o.ok;
    if (o.ok) {
      if (!to_self)
        reply.result = std::move(o.value);
      else
        reply.result = ctx.valid() ? o.value.clone_with_graph() : o.value.deep_copy();
      if (ctx.valid() && !to_self && rt->autograd) rt->autograd->on_send(ctx, {&reply.result}, caller_rank, reply.autograd);
    } else {
      reply.error = std::move(o.error);
    }
    // Order matters for termination detection: count the reply as sent
    // before this request stops counting as in flight.
    rt->counters.sent.fetch_add(1, std::memory_order_relaxed);
    if (caller) {
      auto to = caf::actor_cast<worker_peer>(caller);
      if (reply.ok && !to_self) {
        if (rt->rrefs && reply.result.contains_rref()) rt->rrefs->fork_for(reply.result, caller_rank);
        if (rt->bulk && rt->bulk->try_send(caller_rank, reply)) {  // B8 of Note [Bulk path]
          rt->counters.in_flight.fetch_sub(1, std::memory_order_acq_rel);
          return;
        }
        std::vector<TensorChunk> chunks;
        split_large_tensors(reply.result, rt->opts.max_message_bytes, rt->transfer_ids, chunks);
        for (auto& c : chunks) caf::anon_send(to, std::move(c));  // before the reply: FIFO per sender
      }
      caf::anon_send(to, std::move(reply));
    }
    rt->counters.in_flight.fetch_sub(1, std::memory_order_acq_rel);
  };
}

void execute_request(Runtime* rt, CallRequest&& req, Completion reply) {
  auto fail = [&](ErrorKind k, const std::string& msg) {
    reply(Outcome::failure(make_error(k, rt->name(), "worker " + rt->name() + ": " + msg)));
  };
  if (rt->state.load() == RunState::stopped) return fail(ErrorKind::Shutdown, "is shut down");
  const FunctionEntry* entry = nullptr;
  if (is_builtin_name(req.function)) {  // Note [Only registered code runs]
    if (auto why = refused_builtin(req.function))
      return fail(ErrorKind::Lookup, "'" + req.function + "' cannot be called remotely: " + why);
    if (small_builtin_call(req.args)) return run_request(rt, nullptr, std::move(req), reply);
  } else {
    entry = FunctionRegistry::instance().find(req.function);
    if (!entry) {
      if (rt->class_known && rt->class_known(req.function))
        return fail(ErrorKind::Type, "'" + req.function + "' is a class: construct it with remote<" + req.function +
                                         ">(...), which returns an RRef to the new object");
      return fail(ErrorKind::Lookup, "unknown function '" + req.function + "'");
    }
  }
  auto fn = req.function;
  auto saturated = [rt, fn, reply] {
    auto limit = std::to_string(rt->opts.max_worker_threads);
    reply(Outcome::failure(make_error(
        ErrorKind::Remote, rt->name(),
        "worker " + rt->name() + " cannot run '" + fn + "': all " + limit +
            " executor threads are blocked in nested calls (WorkerOptions::max_worker_threads = " + limit + ")")));
  };
  bool accepted = rt->post([rt, entry, req = std::move(req), reply]() mutable {
    run_request(rt, entry, std::move(req), reply);
  }, saturated);
  if (!accepted) saturated();
}

void deliver_request(Runtime& rt, CallRequest&& req, const caf::strong_actor_ptr& sender, ChunkAssembler* chunks) {
  auto* rtp = &rt;
  // In flight before received: a termination probe between the two must not
  // see the sums balanced and nothing running (off the actor nothing else
  // orders them).
  rt.counters.in_flight.fetch_add(1, std::memory_order_acq_rel);
  rt.counters.received.fetch_add(1, std::memory_order_relaxed);
  for (auto& a : req.args) {
    auto err = chunks ? chunks->resolve(a) : std::string();
    if (!err.empty()) {
      make_replier(rtp, sender, req)(
          Outcome::failure(make_error(ErrorKind::Internal, rt.name(), "worker " + rt.name() + ": " + err)));
      return;
    }
  }
  if (req.autograd.in_context() && req.caller != rt.rank() && rt.autograd) {
    std::vector<Value*> values;
    for (auto& a : req.args) values.push_back(&a);
    rt.autograd->on_receive(req.autograd, values, req.caller);  // the paired RecvRpcBackward
  }
  if (rt.rrefs && rt.rrefs->wants(req)) {
    rt.rrefs->handle_request(std::move(req), sender);
    return;
  }
  auto reply = make_replier(rtp, sender, req);
  execute_request(rtp, std::move(req), std::move(reply));
}

void handle_request_impl(worker_pointer self, CallRequest&& req, const caf::strong_actor_ptr& sender) {
  deliver_request(*self->state.rt, std::move(req), sender, &self->state.chunks);
}

void handle_chunk_impl(worker_pointer self, TensorChunk&& chunk) {
  auto from = chunk.transfer.worker();
  auto err = self->state.chunks.add(std::move(chunk));
  if (!err.empty())
    std::fprintf(stderr, "castor[%s]: dropped a tensor chunk from %s: %s\n", self->state.rt->name().c_str(),
                 self->state.rt->name_of(from).c_str(), err.c_str());
}

}  // namespace castor::detail
