// AutogradRuntime: attaching send/recv functions in the forward pass, routing
// backward messages to contexts, the container of contexts.
#include "engine/autograd_runtime.hpp"

#include <caf/logger.hpp>
#include <caf/send.hpp>
#include <torch/csrc/autograd/variable.h>

#include "actors/hooks/thread_autograd_context.hpp"
#include "actors/hooks/worker_services.hpp"
#include "actors/calls/thread_context.hpp"
#include "engine/gradient_store.hpp"
#include "engine/graph_task_actor.hpp"
#include "engine/lineage.hpp"

namespace castor::detail {

AutogradRuntime& autograd_runtime(WorkerServices& rt) { return static_cast<AutogradRuntime&>(*rt.autograd()); }

AutogradRuntime::AutogradRuntime(WorkerServices& rt)
    : message_ids(rt.rank(), rt.options().incarnation), rt_(rt), context_ids_(rt.rank(), rt.options().incarnation) {}

AutogradRuntime::~AutogradRuntime() { stop(); }

AutogradMode AutogradRuntime::mode() const { return rt_.options().autograd_mode; }

ContextId AutogradRuntime::current_context() const { return thread_autograd_context(); }

ContextId AutogradRuntime::set_current_context(ContextId ctx) { return exchange_thread_autograd_context(ctx); }

context_actor AutogradRuntime::context(ContextId id, bool create) {
  std::lock_guard<std::mutex> lock(mtx_);
  auto it = contexts_.find(id);
  if (it != contexts_.end()) return it->second;
  auto box = gate_.closed() ? nullptr : entry_locked(id, create);
  if (!box) return context_actor{};
  auto actor = spawn_context_actor(*this, id, gradients_.at(id), std::move(box));  // F2 of Note [Forward inbox]
  // Spawning from a user's thread leaves CAF's logger referenced in that
  // thread's locals, and the actor system's end waits for every such
  // reference: drop ours (CAF's own threads keep theirs).
  if (!on_caf_thread()) caf::logger::set_current_actor_system(nullptr);
  contexts_.emplace(id, actor);
  return actor;
}

std::shared_ptr<ForwardInbox> AutogradRuntime::entry_locked(ContextId id, bool create) {
  auto it = inboxes_.find(id);
  if (it != inboxes_.end()) return it->second;
  if (!create || gate_.closed() || released_.count(id)) return nullptr;
  auto box = std::make_shared<ForwardInbox>();
  inboxes_.emplace(id, box);
  gradients_.emplace(id, std::make_shared<GradientStore>());
  created_.emplace(id, std::chrono::steady_clock::now());
  counters_.contexts.fetch_add(1);
  return box;
}

std::shared_ptr<ForwardInbox> AutogradRuntime::inbox(ContextId id) {
  std::lock_guard<std::mutex> lock(mtx_);
  return entry_locked(id, true);
}

std::shared_ptr<GradientStore> AutogradRuntime::gradients_of(ContextId id) const {
  std::lock_guard<std::mutex> lock(mtx_);
  auto it = gradients_.find(id);
  return it == gradients_.end() ? nullptr : it->second;
}

ContextId AutogradRuntime::create_context() {
  auto id = context_ids_.next();
  inbox(id);  // its actor comes with its first backward pass (F2 of Note [Forward inbox])
  return id;
}

void AutogradRuntime::forget(ContextId id) {
  std::lock_guard<std::mutex> lock(mtx_);
  contexts_.erase(id);
  if (inboxes_.erase(id)) counters_.contexts.fetch_sub(1);
  gradients_.erase(id);  // K2 of Note [Gradient store]
  created_.erase(id);
  // Note [Released contexts]
  // ~~~~~~~~~~~~~~~~~~~~~~~~
  // A message for a context that was cleaned up here (a gradient or a
  // cleanup on its way when the context ended) must not make it again: it
  // would live until shutdown. The ids are remembered, but not forever: a
  // job makes a context per step, and a set that only grows would cost about
  // 40 MB per million steps. The last 65536 are kept (about 3 MB); a message
  // would have to arrive after 65536 later contexts ended here to be
  // mistaken for a new one; it would then make an empty context that lives,
  // visible to castor inspect, until this worker shuts down.
  if (released_.insert(id).second) {
    released_order_.push_back(id);
    if (released_order_.size() > kMaxReleased) {
      released_.erase(released_order_.front());
      released_order_.pop_front();
    }
  }
}

void AutogradRuntime::on_send(ContextId ctx, const std::vector<Value*>& values, WorkerId to, AutogradMeta& meta) {
  meta.context = ctx;
  auto box = inbox(ctx);
  if (!box) return;  // released already: the call goes out without autograd
  std::vector<at::Tensor*> tensors;
  for (auto* v : values)
    v->for_each_tensor([&](at::Tensor& t) {
      if (t.defined() && t.requires_grad()) tensors.push_back(&t);
    });
  std::shared_ptr<SendRpcBackward> node;
  if (!tensors.empty()) {
    node = std::make_shared<SendRpcBackward>(message_ids.next(), to);
    torch::autograd::edge_list edges;
    for (auto* t : tensors) {
      edges.push_back(torch::autograd::impl::gradient_edge(*t));
      node->add_input_metadata(*t);
    }
    if (mode() == AutogradMode::smart) node->lineage = lineage_of(ctx, edges);
    node->set_next_edges(std::move(edges));
    meta.message = node->id();
    meta.lineage = node->lineage;
    counters_.sends.fetch_add(1);
    counters_.sends_total.fetch_add(1);
    counters_.lineage_bytes.fetch_add(int64_t(meta.lineage.size() * sizeof(uint64_t)));
  }
  // F1 of Note [Forward inbox]: before the call leaves.
  std::lock_guard<std::mutex> lock(box->mtx);
  if (to != rt_.rank()) box->peers.insert(to);
  if (node) box->sends.push_back(std::move(node));
}

void AutogradRuntime::on_receive(const AutogradMeta& meta, const std::vector<Value*>& values, WorkerId from) {
  if (!meta.in_context()) return;
  auto box = inbox(meta.context);
  if (!box) return;
  std::shared_ptr<RecvRpcBackward> node;
  if (meta.message.valid()) {
    node = std::make_shared<RecvRpcBackward>(meta.message, from, meta.context);
    node->lineage = meta.lineage;
    for (auto* v : values)
      v->for_each_tensor([&](at::Tensor& t) {
        if (!t.defined() || !t.requires_grad()) return;
        // The received leaf becomes an output of the recv function.
        t.set_requires_grad(false);
        auto nr = node->add_input_metadata(t);
        torch::autograd::impl::set_gradient_edge(t, torch::autograd::Edge(node, nr));
      });
    counters_.recvs.fetch_add(1);
  }
  // F1 of Note [Forward inbox]: before the call runs (or its reply is seen).
  std::lock_guard<std::mutex> lock(box->mtx);
  if (from != rt_.rank()) box->peers.insert(from);
  if (node) box->recvs.push_back(std::move(node));
}

// The context actor runs on the thread that delivers its message (a link's
// reader, for a gradient on the direct lane): Note [Actors run where their
// messages arrive].
void AutogradRuntime::handle_grad(BackwardGrad&& grad, WorkerId from) {
  if (auto actor = context(grad.context, false)) {
    deliver(actor, IncomingGrad{std::move(grad), from, nullptr});
    return;
  }
  answer_gradient(rt_, grad, from,
                  make_error(ErrorKind::Autograd, rt_.name(),
                             "worker " + rt_.name() + " has no autograd context " +
                                 std::to_string(grad.context.as_int()) + " (released already?)"));
}

void AutogradRuntime::handle_done(BackwardDone&& done) {
  if (auto actor = context(done.context, false)) deliver(actor, std::move(done));
}

void AutogradRuntime::handle_control(ContextControl&& msg) {
  if (msg.op == ContextControl::join) return handle_join(msg);
  if (auto actor = context(msg.context, false)) deliver(actor, std::move(msg));
}

// J1 of Note [Context cleanup]: a join for a live context goes into its
// inbox under our lock; one for a context released here already (or never
// known) is answered with its cleanup.
void AutogradRuntime::handle_join(const ContextControl& msg) {
  if (msg.from == rt_.rank()) return;
  {
    std::lock_guard<std::mutex> lock(mtx_);
    auto it = inboxes_.find(msg.context);
    if (it != inboxes_.end()) {
      std::lock_guard<std::mutex> box_lock(it->second->mtx);
      it->second->peers.insert(msg.from);
      return;
    }
  }
  if (msg.context.worker() != rt_.rank() || !rt_.world().peer(msg.from)) return;
  rt_.counters().sent.fetch_add(1);
  rt_.send_to_peer(msg.from, ContextControl{msg.context, ContextControl::cleanup, rt_.rank(), {}, {}});
}

void AutogradRuntime::on_peer_down(WorkerId rank) {
  // A context made by the dead worker is released here, and one that talked
  // to it asks its creator to reach us directly (Note [Context cleanup]): so
  // one that has no actor yet gets one now (F2).
  std::vector<ContextId> touched;
  {
    std::lock_guard<std::mutex> lock(mtx_);
    for (auto& [id, box] : inboxes_) {
      if (contexts_.count(id)) continue;
      bool talked = id.worker() == rank;
      if (!talked) {
        std::lock_guard<std::mutex> box_lock(box->mtx);
        talked = box->peers.count(rank) > 0;
      }
      if (talked) touched.push_back(id);
    }
  }
  for (auto id : touched) context(id, false);
  std::vector<context_actor> all;
  {
    std::lock_guard<std::mutex> lock(mtx_);
    for (auto& [id, a] : contexts_) all.push_back(a);
  }
  for (auto& a : all) deliver(a, peer_down_atom::value, rank);
}

std::optional<std::chrono::steady_clock::time_point> AutogradRuntime::sweep(std::chrono::steady_clock::time_point now) {
  std::optional<std::chrono::steady_clock::time_point> next;
  for (auto& task : deadlines_.take_due(now, next))
    caf::anon_send(caf::actor_cast<graph_task_actor>(std::move(task)), sweep_atom::value);
  return next;
}

uint64_t AutogradRuntime::next_pass_id() {
  // Note [Incarnation ids]: a rejoined worker's passes never reuse its
  // previous life's numbers.
  return (uint64_t(uint32_t(rt_.rank())) << 40) | (uint64_t(rt_.options().incarnation - 1) << 32) |
         (passes_.fetch_add(1) + 1);
}

caf::actor_system& AutogradRuntime::system() { return rt_.system(); }

void AutogradRuntime::request_sweep() {
  rt_.request_sweep();
}

std::map<std::string, int64_t> AutogradRuntime::debug_info() const {
  return {{"num_autograd_contexts", counters_.contexts.load()},
          {"num_send_functions", counters_.sends.load()},
          {"num_recv_functions", counters_.recvs.load()},
          {"num_running_graph_tasks", counters_.graph_tasks.load()},
          {"send_functions_total", counters_.sends_total.load()},
          {"lineage_bytes_total", counters_.lineage_bytes.load()}};
}

AutogradInspection AutogradRuntime::inspect() const {
  AutogradInspection out;
  auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mtx_);
  for (auto& [id, created] : created_)
    out.contexts.push_back(
        AutogradContextInfo{to_string(id), std::chrono::duration_cast<std::chrono::milliseconds>(now - created).count()});
  return out;
}

bool AutogradRuntime::idle() const { return counters_.graph_tasks.load() == 0; }

void AutogradRuntime::stop() {
  // Runs twice: in the runtime's teardown, while the actor system lives, and
  // again in our destructor, after the system is gone. So the first call
  // takes every handle out: the second finds nothing to message (a context
  // left live at shutdown() once crashed both workers here), and no handle
  // outlives the system it belongs to.
  std::unordered_map<ContextId, context_actor> all;
  std::unordered_map<ContextId, std::shared_ptr<ForwardInbox>> boxes;  // their graphs go here
  {
    std::lock_guard<std::mutex> lock(mtx_);
    gate_.close();  // D8: from now on our actors run on CAF's threads
    all.swap(contexts_);
    boxes.swap(inboxes_);
  }
  backward_waiters_->close(rt_.name());  // BW1 of Note [Backward at shutdown]
  for (auto& [id, a] : all) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  deadlines_.close();
  // D8 of Note [Actors run where their messages arrive]: our actors run on
  // CAF's threads now, which the actor system joins; wait (a bounded while)
  // for those that castor's threads were running when stop() began.
  gate_.close_and_wait(std::chrono::seconds(5));
}

}  // namespace castor::detail
