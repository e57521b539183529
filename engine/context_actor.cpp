// The autograd context actor: forward-pass bookkeeping, gradients, starting
// graph tasks, and cleanup that travels along the workers it talked to.
#include "engine/context_actor.hpp"

#include <algorithm>
#include <deque>
#include <set>
#include <unordered_map>

#include <ATen/ATen.h>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <torch/csrc/autograd/variable.h>

#include "actors/hooks/worker_services.hpp"
#include "engine/autograd_runtime.hpp"
#include "engine/gradient_store.hpp"
#include "engine/graph_task_actor.hpp"
#include "engine/lineage.hpp"

namespace castor::detail {

// Note [Context cleanup]
// ~~~~~~~~~~~~~~~~~~~~~~
// A context lives on every worker that sent or received a message in it.
// Each worker's context actor remembers the workers it exchanged messages
// with (`peers`). Releasing the context on its creator sends cleanup to those
// peers; each receiver forwards it to its own peers (except the sender), then
// ends its context actor and remembers the id as released, so that a late
// message never recreates it and a second cleanup is ignored. Every worker
// that took part is reached, because it is a peer of some worker that is.
// An abort after a failed backward pass travels the same way and stops the
// running graph task on each worker.
// A creator that dies never releases its context: every survivor that took
// part releases its own part when it learns of the death (release_orphan;
// each survivor learns it itself, so no cleanup travels), and counts it in
// what the dead worker left behind (castor inspect).
// A worker that dies can also have been the only way from the creator to a
// survivor (worker0 called worker1, which called worker2 in the context):
// the creator's cleanup would travel through the dead worker and never reach
// the survivor. So a survivor that exchanged messages in a context with the
// dead worker, and is not the creator, asks the creator to count it among
// its peers (join); the creator's cleanup then reaches it directly. A
// creator that has released the context already answers the join with a
// cleanup at once (AutogradRuntime::handle_join).
//  J1 A join and the creator's release are ordered under the runtime's
//     lock, so a join is never lost between them: the runtime puts a join
//     for a live context into its inbox (no message to the actor, which
//     may be ending), and the actor forgets the context before it takes
//     the inbox one last time and sends its cleanups. A join that finds
//     the context live is in that last take; one that comes after finds it
//     released and is answered. Before, a join looked the actor up, and the
//     actor could end between the lookup and the delivery: the join was
//     dropped with its mailbox and the survivor kept its part until it
//     shut down (test_deaths, a gradient sent ahead of a slow node, one
//     run in six under ASan and load).

namespace {

struct context_state {
  static inline const char* name = "castor.autograd_context";

  AutogradRuntime* ar = nullptr;
  WorkerServices* rt = nullptr;
  ContextId id;
  // Forward pass: the send/recv functions of this context here, by message id
  // (kept alive by the context); the workers this context talked to.
  std::unordered_map<uint64_t, std::shared_ptr<SendRpcBackward>> sends;
  std::unordered_map<uint64_t, std::shared_ptr<RecvRpcBackward>> recvs;
  std::set<WorkerId> peers;
  std::shared_ptr<GradientStore> grads;  // filled by our graph tasks (Note [Gradient store])
  std::shared_ptr<ForwardInbox> inbox;   // the forward pass's registrations (Note [Forward inbox])
  graph_task_actor task;        // the pass running here, if any
  uint64_t task_pass = 0;       // its id (C4 of Note [FAST mode])
  std::deque<uint64_t> ended_passes;  // the last few that ended here (C4)
  bool graph_released = false;  // a pass without retain_graph ran
};

using context_pointer = context_actor::stateful_pointer<context_state>;

// F1 of Note [Forward inbox]: what the forward pass registered since.
void take_forward(context_pointer self) {
  auto& st = self->state;
  std::vector<std::shared_ptr<SendRpcBackward>> sends;
  std::vector<std::shared_ptr<RecvRpcBackward>> recvs;
  std::set<WorkerId> peers;
  {
    std::lock_guard<std::mutex> lock(st.inbox->mtx);
    sends.swap(st.inbox->sends);
    recvs.swap(st.inbox->recvs);
    peers.swap(st.inbox->peers);
  }
  for (auto& n : sends) st.sends.emplace(n->id().packed, std::move(n));
  for (auto& n : recvs) st.recvs.emplace(n->send_id().packed, std::move(n));
  st.peers.insert(peers.begin(), peers.end());
}

void send_to_peer(WorkerServices* rt, WorkerId to, const ContextControl& msg) {
  if (!rt->world().peer(to)) return;
  rt->counters().sent.fetch_add(1);
  rt->send_to_peer(to, ContextControl(msg));
}

void answer(WorkerServices* rt, const IncomingGrad& ig, std::optional<ErrorInfo> error) {
  answer_gradient(*rt, ig.grad, ig.from, error);
}

ErrorInfo context_error(context_pointer self, const std::string& why) {
  auto* rt = self->state.rt;
  return make_error(ErrorKind::Autograd, rt->name(),
                    "worker " + rt->name() + ", autograd context " + std::to_string(self->state.id.as_int()) + ": " + why);
}

std::optional<std::string> refuse_pass(context_pointer self) {
  auto& st = self->state;
  if (st.task) return std::string("a backward pass is already running in this context");
  if (st.graph_released)
    return std::string(
        "backward was already run in this context without retain_graph=true, so its graph is released; "
        "pass retain_graph=true to run backward more than once");
  return std::nullopt;
}

void start_root(context_pointer self, StartBackward&& sb) {
  auto& st = self->state;
  if (auto why = refuse_pass(self)) return sb.done(context_error(self, *why));
  std::vector<torch::autograd::Edge> edges;
  std::vector<at::Tensor> grads;
  for (size_t i = 0; i < sb.roots.size(); ++i) {
    const auto& r = sb.roots[i];
    if (!r.defined() || !r.requires_grad())
      return sb.done(context_error(self, "root " + std::to_string(i) + " of backward does not require grad"));
    edges.push_back(torch::autograd::impl::gradient_edge(r));
    grads.push_back(at::ones_like(r, at::MemoryFormat::Preserve));
  }
  auto core = std::make_shared<GraphTaskCore>(sb.retain_graph);
  auto part = participating_sends(st.ar->mode(), st.id, st.sends, edges, std::nullopt);
  core->compute_dependencies(edges, part.sends);
  core->add_root_grads(edges, std::move(grads));
  TaskStart start;
  start.participants = std::move(part.ids);
  start.context = st.id;
  start.retain_graph = sb.retain_graph;
  start.timeout = sb.timeout;
  start.core = std::move(core);
  start.on_end = std::move(sb.done);
  start.grads = st.grads;
  start.pass = st.task_pass = st.ar->next_pass_id();
  st.task = spawn_graph_task(self, *st.ar, caf::actor_cast<context_actor>(self), std::move(start));
  self->link_to(st.task);
}

void on_incoming_grad(context_pointer self, IncomingGrad&& ig) {
  auto& st = self->state;
  auto it = st.sends.find(ig.grad.send.packed);
  if (it == st.sends.end())
    return answer(st.rt, ig,
                  context_error(self, "no send function with autograd_message_id " +
                                          std::to_string(ig.grad.send.as_int()) + " here"));
  ig.send = it->second;
  if (st.task) {
    self->send(st.task, std::move(ig));  // a later gradient of the running pass
    return;
  }
  if (ig.grad.request == 0) return;  // C3 of Note [FAST mode]: its pass ended here
  if (std::find(st.ended_passes.begin(), st.ended_passes.end(), ig.grad.pass) != st.ended_passes.end())
    return answer(st.rt, ig, context_error(self, "a gradient of an ended backward pass arrived"));  // C4
  // The first gradient of a pass to reach this worker starts its part.
  if (auto why = refuse_pass(self)) return answer(st.rt, ig, context_error(self, *why));
  auto core = std::make_shared<GraphTaskCore>(ig.grad.retain_graph);
  auto part = participating_sends(st.ar->mode(), st.id, st.sends, {}, ig.grad.participants);
  core->compute_dependencies({}, part.sends);
  TaskStart start;
  start.participants = std::move(part.ids);
  start.context = st.id;
  start.retain_graph = ig.grad.retain_graph;
  start.timeout = std::chrono::milliseconds(ig.grad.timeout_ms);
  start.core = std::move(core);
  start.pass = st.task_pass = ig.grad.pass;
  start.first = std::move(ig);
  start.grads = st.grads;
  st.task = spawn_graph_task(self, *st.ar, caf::actor_cast<context_actor>(self), std::move(start));
  self->link_to(st.task);
}

void on_task_ended(context_pointer self, TaskEnded&& e) {
  auto& st = self->state;
  if (st.task) self->unlink_from(st.task);
  st.task = nullptr;
  st.ended_passes.push_back(st.task_pass);  // C4: its late gradients are refused
  if (st.ended_passes.size() > 8) st.ended_passes.pop_front();
  if (e.released_graph) st.graph_released = true;
  if (e.error) {
    // Stop the pass everywhere else too (see Note [Context cleanup]).
    ContextControl abort{st.id, ContextControl::abort, st.rt->rank(), *e.error};
    for (auto p : st.peers) send_to_peer(st.rt, p, abort);
  }
}

void on_control(context_pointer self, ContextControl&& msg) {
  auto& st = self->state;
  auto from = msg.from;
  msg.from = st.rt->rank();
  if (msg.op == ContextControl::abort) {
    if (!st.task) return;  // nothing running here: the abort stops travelling
    self->send(st.task, msg);
    for (auto p : st.peers)
      if (p != from) send_to_peer(st.rt, p, msg);
    return;
  }
  // J1 of Note [Context cleanup]: forgotten first, then the inbox's last
  // joins are taken.
  st.ar->forget(st.id);
  take_forward(self);
  for (auto p : st.peers)
    if (p != from) send_to_peer(st.rt, p, msg);
  st.ar->counters().sends.fetch_sub(int64_t(st.sends.size()));
  st.ar->counters().recvs.fetch_sub(int64_t(st.recvs.size()));
  st.sends.clear();
  st.recvs.clear();
  if (st.task) {
    ContextControl abort{st.id, ContextControl::abort, st.rt->rank(),
                         context_error(self, "the context was released during a backward pass")};
    self->send(st.task, abort);
  }
  self->quit();
}

// Note [Context cleanup], a dead creator: see there.
void release_orphan(context_pointer self, WorkerId creator) {
  auto& st = self->state;
  st.rt->note_released(creator, "autograd_contexts");
  st.peers.clear();  // the other survivors release their own parts
  on_control(self, ContextControl{st.id, ContextControl::cleanup, creator, {}, {}});
}

context_actor::behavior_type context_behavior(context_pointer self, AutogradRuntime* ar, ContextId id,
                                              std::shared_ptr<GradientStore> grads,
                                              std::shared_ptr<ForwardInbox> inbox) {
  self->state.ar = ar;
  self->state.grads = std::move(grads);
  self->state.inbox = std::move(inbox);
  self->state.rt = &ar->services();
  self->state.id = id;
  // Every handler starts with take_forward (F1 of Note [Forward inbox]).
  return {
      [self](StartBackward& sb) {
        take_forward(self);
        start_root(self, std::move(sb));
      },
      [self](IncomingGrad& ig) {
        take_forward(self);
        on_incoming_grad(self, std::move(ig));
      },
      [self](BackwardDone& d) {
        if (self->state.task) self->send(self->state.task, std::move(d));
      },
      [self](TaskEnded& e) {
        take_forward(self);
        on_task_ended(self, std::move(e));
      },
      [self](ContextControl& msg) {
        take_forward(self);
        on_control(self, std::move(msg));
      },
      [self](peer_down_atom, WorkerId w) {
        take_forward(self);
        auto& st = self->state;
        if (st.task) self->send(st.task, peer_down_atom::value, w);
        auto creator = st.id.worker();
        if (w == creator) return release_orphan(self, w);
        // Note [Context cleanup], the dead link: the creator may have had
        // no other way to us.
        if (st.peers.erase(w) && creator != st.rt->rank())
          send_to_peer(st.rt, creator, ContextControl{st.id, ContextControl::join, st.rt->rank(), {}, {}});
      },
  };
}

}  // namespace

void answer_gradient(WorkerServices& rt, const BackwardGrad& grad, WorkerId from, const std::optional<ErrorInfo>& error) {
  if (grad.request == 0) return;  // C2 of Note [FAST mode]: it wants no answer
  if (!rt.world().peer(from)) return;
  BackwardDone done;
  done.context = grad.context;
  done.request = grad.request;
  done.ok = !error;
  if (error) done.error = *error;
  rt.counters().sent.fetch_add(1);
  rt.send_to_peer(from, std::move(done));
}

context_actor spawn_context_actor(AutogradRuntime& ar, ContextId id, std::shared_ptr<GradientStore> grads,
                                  std::shared_ptr<ForwardInbox> inbox) {
  // Lazily: its first message's thread runs it (Note [Actors run where
  // their messages arrive]).
  return ar.services().system().spawn<caf::lazy_init>(context_behavior, &ar, id, std::move(grads), std::move(inbox));
}

}  // namespace castor::detail
