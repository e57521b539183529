// The graph task actor: hands its core to an executor thread to run ready
// nodes, sends gradients on, answers the gradients it received, ends when
// its part of the pass is done.
#include "engine/graph_task_actor.hpp"
#include "engine/gradient_store.hpp"

#include <deque>
#include <vector>

#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/hooks/worker_services.hpp"
#include "engine/autograd_runtime.hpp"

namespace castor::detail {

// Note [FAST mode]
// ~~~~~~~~~~~~~~~~
// A backward pass runs on every worker its context reached. On each worker a
// graph task counts dependencies over what is reachable from the roots (on
// the worker that called backward) and from the context's send functions
// (FAST mode assumes every send function receives a gradient). When a
// RecvRpcBackward becomes ready, its gradients go to the worker of the paired
// send function as a BackwardGrad request; there the send function is fed
// and its part of the graph runs, in the graph task for the context, which
// the first such gradient creates.
//
// Completion: a request is answered (BackwardDone) when the receiving part is
// done. The first gradient to reach a worker is answered when that worker's
// whole graph task has finished (every node of the pass there ran) and every
// gradient it sent on has been answered; a later gradient of the same pass
// is answered when the nodes it made ready have run. The first contacts form
// a tree rooted at the backward() caller (a worker is first contacted once),
// so the caller's completion waits, transitively, for everything, and no two
// workers ever wait for each other's completion, so cycles between workers
// (A -> B -> A round trips) cannot deadlock. A send function that never gets
// a gradient leaves its graph task waiting: the watchdog fails the pass after
// its timeout, naming the send (SMART mode does not wait for such sends;
// see Note [Graph task watchdog]).
//
// The last word goes with the gradients. Most parts end by sending their
// gradients back to the worker that started them (a forward call's result
// flows back to the caller), which would then cost two more one-way
// messages: the parent's answer, then our own answer to the parent.
//  C1 A part whose last drain leaves it finished, with no request of its
//     own outstanding and every outgoing gradient bound for its parent (the
//     sender of its first gradient), sends them with `completes` = the
//     parent's request and `request` = 0 (no answer wanted), and ends at
//     once. Its part is done but for those gradients, which the parent
//     runs in its own graph task.
//  C2 The parent takes such a gradient as the answer to its request (the
//     child's part is done) and runs it as its own work: its completion
//     waits for it as for any node of its own, and if it fails, the parent's
//     pass fails, which is where the child's answer would have taken the
//     error anyway. It never answers it.
//  C3 A gradient that wants no answer and finds no running pass (the parent
//     failed meanwhile) is dropped: nobody waits for it, and it must not
//     start a pass of its own.
//  C4 Every gradient names its pass (the root's rank and a counter). One
//     that belongs to a pass other than the running one, or to one of the
//     last 8 passes that ended in this context here (ended_passes in the
//     context actor; it was on its way when the pass failed), is refused: it
//     must neither feed a retried pass (retain_graph) nor count as the
//     answer to one of its requests, nor start a pass of its own. A gradient
//     of a pass that ended more than 8 passes ago in the same context is not
//     recognised: it would have to lag behind 8 whole backward passes of its
//     own context, each of which waits for its answers.
//  C5 A part that ends tells its context before anything of it leaves that
//     lets a peer go on: its answers, its last word (C1). The next pass's
//     first gradient (retain_graph) comes after those, so it finds the
//     context free and starts a part. Told after, the context could still
//     name the ended part as running and pass the gradient to an actor that
//     had quit, where CAF drops it: its sender then waited out the pass's
//     timeout for an answer (test_autograd's retain_graph case under load,
//     about 1 run in 30).
//
// Nodes run on executor threads, one drain at a time per task: the core is
// handed to one thread, which runs ready nodes until none is left; gradients
// arriving meanwhile wait in the actor's mailbox. Light nodes (castor's own,
// small built-in ones) the actor runs itself (Note [Light nodes]).

namespace {

using Clock = std::chrono::steady_clock;

struct task_state {
  static inline const char* name = "castor.graph_task";

  AutogradRuntime* ar = nullptr;
  WorkerServices* rt = nullptr;
  context_actor context;
  TaskStart start;
  std::shared_ptr<GraphTaskCore> core;     // null while an executor thread runs it
  std::vector<IncomingGrad> queued;        // later gradients that arrived during a drain
  std::vector<IncomingGrad> answer_after;  // later gradients, answered when their drain ends
  struct Outstanding {
    WorkerId to = -1;
    AutogradMessageId send;  // the send function there
    Clock::time_point sent;
  };
  std::unordered_map<uint64_t, Outstanding> outstanding;  // our BackwardGrad requests awaiting answers
  uint64_t next_request = 1;
  Clock::time_point last_progress = Clock::now();
  bool ended = false;
  std::optional<uint64_t> watch;  // our entry on the deadline board (W3)
  Clock::time_point watch_due;
};

using task_pointer = graph_task_actor::stateful_pointer<task_state>;

std::vector<at::Tensor> tensors_of(std::vector<Value>&& values) {
  std::vector<at::Tensor> out;
  out.reserve(values.size());
  for (auto& v : values) out.push_back(v.is_tensor() ? std::move(v.to_tensor()) : at::Tensor());
  return out;
}

void answer(task_pointer self, const IncomingGrad& ig, const std::optional<ErrorInfo>& error) {
  answer_gradient(*self->state.rt, ig.grad, ig.from, error);
}

void finish(task_pointer self, std::optional<ErrorInfo> error) {
  auto& st = self->state;
  if (st.ended) return;
  st.ended = true;
  if (st.watch) st.ar->deadlines().unwatch(*st.watch);
  // C5: the context learns first, before any answer can let a peer (or the
  // backward() caller here) start another pass.
  self->send(st.context, TaskEnded{error, !st.start.retain_graph});
  for (auto& ig : st.answer_after) answer(self, ig, error);
  for (auto& ig : st.queued) answer(self, ig, error);
  if (st.start.first) answer(self, *st.start.first, error);
  if (st.start.on_end) st.start.on_end(error);
  st.ar->counters().graph_tasks.fetch_sub(1);
  self->quit();
}

ErrorInfo task_error(task_pointer self, ErrorKind kind, const std::string& why) {
  auto* rt = self->state.rt;
  return make_error(kind, rt->name(), "worker " + rt->name() + ": backward pass in autograd context " +
                                        std::to_string(self->state.start.context.as_int()) + " failed: " + why);
}

void watch_deadline(task_pointer self);

// W1 of Note [Graph task watchdog]: nothing to run and nothing of ours
// outstanding, yet nodes left: only gradients from peers can move it on.
bool is_stalled(const task_state& st) {
  return st.core && !st.core->has_ready() && st.outstanding.empty() && !st.core->finished();
}

void check_end(task_pointer self) {
  auto& st = self->state;
  if (st.ended || !st.core || st.core->has_ready() || !st.outstanding.empty()) return;
  if (st.core->finished()) return finish(self, std::nullopt);
  watch_deadline(self);  // W1: waiting for gradients that only peers can send
}

void on_drain_done(task_pointer self, DrainDone&& d);

// Runs the light nodes at the front of the ready queue on this actor's own
// thread, without a hand-off (Note [Light nodes]).
void drain_here(task_pointer self) {
  auto& st = self->state;
  DrainDone d;
  {
    ContextScope scope(st.ar, st.start.context);
    try {
      st.core->run(d.outgoing, /*light_only=*/true);
    } catch (const std::exception& e) {
      d.error = e.what();
    }
  }
  d.captured = st.core->take_captured();
  d.core = std::move(st.core);
  on_drain_done(self, std::move(d));
}

void drain(task_pointer self) {
  auto& st = self->state;
  if (st.ended || !st.core) return;  // an executor thread has it
  if (!st.core->has_ready()) {
    for (auto& ig : st.answer_after) answer(self, ig, std::nullopt);
    st.answer_after.clear();
    check_end(self);
    return;
  }
  if (st.core->next_is_light()) return drain_here(self);
  auto core = std::move(st.core);
  auto me = caf::actor_cast<graph_task_actor>(self);
  auto* ar = st.ar;
  auto ctx = st.start.context;
  bool posted = st.rt->post([core, me, ar, ctx]() mutable {
    DrainDone d;
    // D2 of Note [Drain order]: this thread runs the actor for them, then goes on.
    auto send_early = [&me, ar](std::vector<OutgoingGrad>&& outgoing) {
      DrainDone early;
      early.goes_on = true;
      early.outgoing = std::move(outgoing);
      ar->deliver(me, std::move(early));
    };
    {
      ContextScope scope(ar, ctx);  // hooks and functions run in the pass's context
      try {
        core->run(d.outgoing, /*light_only=*/false, send_early);
      } catch (const std::exception& e) {
        d.error = e.what();
      }
    }
    d.captured = core->take_captured();
    d.core = std::move(core);
    ar->deliver(me, std::move(d));  // the executor's thread runs the task on
  });
  if (!posted) {
    st.core = std::move(core);
    finish(self, task_error(self, ErrorKind::Autograd, "the executor refused the work (saturated or stopped)"));
  }
}

void accept_later_grad(task_pointer self, IncomingGrad&& ig) {
  auto& st = self->state;
  if (st.ended)  // finish() answered what it had; the actor is quitting
    return answer(self, ig, task_error(self, ErrorKind::Autograd, "its backward pass already ended here"));
  if (ig.grad.pass != st.start.pass)  // C4: a gradient of an earlier pass never feeds this one
    return answer(self, ig, task_error(self, ErrorKind::Autograd, "a gradient of an earlier, ended backward pass arrived"));
  if (!st.core) {
    st.queued.push_back(std::move(ig));
    return;
  }
  if (!st.core->add_send_grads(ig.send, tensors_of(std::move(ig.grad.grads)))) {
    auto error = task_error(self, ErrorKind::Autograd,
                            "send function " + std::to_string(ig.grad.send.as_int()) +
                                " got a second gradient or is not part of the pass");
    if (ig.grad.request == 0) return finish(self, std::move(error));  // C2: its sender ended, we carry the error
    answer(self, ig, error);
    return;
  }
  if (ig.grad.completes != 0) {  // C2: the sender's part is done
    auto it = st.outstanding.find(ig.grad.completes);
    if (it != st.outstanding.end() && it->second.to == ig.from) st.outstanding.erase(it);
  }
  if (ig.grad.request != 0) st.answer_after.push_back(std::move(ig));
  st.last_progress = Clock::now();
  drain(self);
}

// C1: this drain ends our part, and all it sends goes to our parent.
bool hands_back_last_word(task_pointer self, const std::vector<OutgoingGrad>& outgoing) {
  auto& st = self->state;
  if (!st.start.first || st.start.first->grad.request == 0 || outgoing.empty()) return false;
  if (!st.outstanding.empty() || !st.queued.empty() || st.core->has_ready() || !st.core->finished()) return false;
  for (const auto& o : outgoing)
    if (o.to != st.start.first->from) return false;
  return true;
}

// The gradients of `outgoing` as messages; with `last_word`, each is the
// answer to our first gradient (C1), else a request of ours that wants an
// answer. Ends the pass, and returns nothing, if a peer is unreachable.
std::optional<std::vector<BackwardGrad>> to_messages(task_pointer self, std::vector<OutgoingGrad>& outgoing,
                                                     bool last_word) {
  auto& st = self->state;
  std::vector<BackwardGrad> grads;
  grads.reserve(outgoing.size());
  for (auto& o : outgoing) {
    auto peer = st.rt->world().peer(o.to);
    if (!peer) {
      finish(self, task_error(self, ErrorKind::Unreachable, "worker " + st.rt->name_of(o.to) + " is unreachable"));
      return std::nullopt;
    }
    auto& g = grads.emplace_back();
    g.context = st.start.context;
    g.send = o.send;
    g.from = st.rt->rank();
    g.pass = st.start.pass;
    if (last_word) {
      g.completes = st.start.first->grad.request;
    } else {
      g.request = st.next_request++;
      st.outstanding.emplace(g.request, task_state::Outstanding{o.to, o.send, Clock::now()});
    }
    g.retain_graph = st.start.retain_graph;
    g.timeout_ms = st.start.timeout.count();
    g.participants = st.start.participants;
    for (auto& t : o.grads) g.grads.push_back(t.defined() ? Value(std::move(t)) : Value());
  }
  return grads;
}

void send_messages(task_pointer self, const std::vector<OutgoingGrad>& outgoing, std::vector<BackwardGrad>& grads) {
  auto& st = self->state;
  for (size_t i = 0; i < grads.size(); ++i) {
    st.rt->counters().sent.fetch_add(1);
    st.rt->send_to_peer(outgoing[i].to, std::move(grads[i]));
  }
}

// D2 of Note [Drain order]: a drain still running sends what it has so far.
void send_early(task_pointer self, DrainDone&& d) {
  auto& st = self->state;
  if (st.ended) return;  // the pass failed meanwhile: nobody wants them
  st.last_progress = Clock::now();
  auto grads = to_messages(self, d.outgoing, /*last_word=*/false);
  if (!grads) return;
  send_messages(self, d.outgoing, *grads);
  watch_deadline(self);  // W2: their answers have a deadline
}

void on_drain_done(task_pointer self, DrainDone&& d) {
  if (d.goes_on) return send_early(self, std::move(d));
  auto& st = self->state;
  st.core = std::move(d.core);
  st.last_progress = Clock::now();
  if (!d.captured.empty() && st.start.grads) st.start.grads->add(std::move(d.captured));  // K1 of Note [Gradient store]
  if (d.error) return finish(self, task_error(self, ErrorKind::Autograd, *d.error));
  bool last_word = hands_back_last_word(self, d.outgoing);  // C1
  auto grads = to_messages(self, d.outgoing, last_word);
  if (!grads) return;
  if (last_word) {
    st.start.first.reset();      // answered by the gradients sent below
    finish(self, std::nullopt);  // C5: the context learns before the parent can start another pass
  }
  send_messages(self, d.outgoing, *grads);
  if (last_word) return;
  if (!d.outgoing.empty()) watch_deadline(self);  // W2: their answers have a deadline
  // A later gradient is answered once the nodes it made ready have run: not
  // after a light drain that stopped before a heavy node; drain() answers it
  // when the queue runs dry.
  if (!st.core->has_ready()) {
    for (auto& ig : st.answer_after) answer(self, ig, std::nullopt);
    st.answer_after.clear();
  }
  // One at a time: a light drain runs within accept_later_grad and may end
  // the task or hand the core away, and what is left stays queued (finish()
  // answers it, or the next DrainDone takes it up).
  while (!st.queued.empty() && st.core && !st.ended) {
    auto ig = std::move(st.queued.front());
    st.queued.erase(st.queued.begin());
    accept_later_grad(self, std::move(ig));
  }
  drain(self);
}

// Note [Graph task watchdog]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A pass never hangs: each graph task fails it, naming the cause, when
//  W1 it is stalled (no ready node, no request of its own outstanding, nodes
//     still to run: it waits for gradients only peers can send) and no
//     progress came for the pass's timeout; or
//  W2 a gradient it sent has not been answered within the pass's timeout
//     (the receiver dropped it as malformed, or its part is stuck in user
//     code; a receiver that dies is reported at once by peer_down). As in
//     PyTorch, where gradients travel as RPCs under the RPC timeout, the
//     answer covers the receiver's whole part, downstream included.
//  W3 No task arms a timer. A timer per task (armed at its start) cost each
//     pass two wake-ups of CAF's clock thread per worker, a fifth of a 1-hop
//     pass on two cores. Instead a task that must be watched puts its
//     earliest deadline on the worker's DeadlineBoard, and the worker
//     actor's sweep (the one that expires calls) pokes it when due; the
//     task then checks W1 and W2 and puts its next deadline back. A sweep
//     is scheduled only when a deadline comes before the planned one, so a
//     stream of passes with one timeout schedules about one per timeout.
void watch_deadline(task_pointer self) {
  auto& st = self->state;
  if (st.ended) return;
  auto limit = st.start.timeout;
  std::optional<Clock::time_point> due;
  if (is_stalled(st)) due = st.last_progress + limit;  // W1
  for (const auto& [request, o] : st.outstanding)  // W2
    if (!due || o.sent + limit < *due) due = o.sent + limit;
  if (!due || (st.watch && st.watch_due <= *due)) return;  // the earlier entry's poke re-checks
  if (st.watch) st.ar->deadlines().unwatch(*st.watch);
  bool sooner = false;
  st.watch = st.ar->deadlines().watch(*due, caf::actor_cast<caf::strong_actor_ptr>(self), sooner);
  st.watch_due = *due;
  if (sooner) st.ar->request_sweep();
}

void watchdog(task_pointer self) {
  auto& st = self->state;
  st.watch.reset();  // the board handed this entry over
  if (st.ended) return;
  auto limit = st.start.timeout;
  auto now = Clock::now();
  if (is_stalled(st) && now - st.last_progress >= limit) {  // W1
    std::string ids;
    for (auto id : st.core->waiting_sends()) ids += (ids.empty() ? "" : ", ") + std::to_string(id.as_int());
    auto hint = st.ar->mode() == AutogradMode::fast
                    ? "; in FAST mode every send function of the context must receive a gradient: use "
                      "castor::AutogradMode::smart to run backward over part of the graph"
                    : "";
    return finish(self, task_error(self, ErrorKind::Timeout,
                                   "waited " + std::to_string(limit.count()) +
                                       " ms for gradients that never arrived, for the send functions with "
                                       "autograd_message_id " + ids + hint));
  }
  for (const auto& [request, o] : st.outstanding)  // W2
    if (now - o.sent >= limit)
      return finish(self, task_error(self, ErrorKind::Timeout,
                                     "worker " + st.rt->name_of(o.to) + " did not answer the gradients sent to it (for "
                                         "the send function with autograd_message_id " + std::to_string(o.send.as_int()) +
                                         ") within " + std::to_string(limit.count()) + " ms"));
  watch_deadline(self);  // W3
}

graph_task_actor::behavior_type task_behavior(task_pointer self, AutogradRuntime* ar, context_actor context,
                                              TaskStart start) {
  auto& st = self->state;
  st.ar = ar;
  st.rt = &ar->services();
  st.context = std::move(context);
  st.start = std::move(start);
  st.core = st.start.core;
  st.start.core = nullptr;
  if (st.start.timeout.count() <= 0) st.start.timeout = st.rt->options().rpc_timeout;
  ar->counters().graph_tasks.fetch_add(1);
  bool started = true;
  if (st.start.first) {
    auto& first = *st.start.first;
    started = st.core->add_send_grads(first.send, tensors_of(std::move(first.grad.grads)));
    if (!started)
      finish(self, task_error(self, ErrorKind::Autograd,
                              "send function " + std::to_string(first.grad.send.as_int()) + " is not part of the pass"));
  }
  if (started) drain(self);
  return {
      [self](IncomingGrad& ig) { accept_later_grad(self, std::move(ig)); },
      [self](BackwardDone& d) {
        auto& st = self->state;
        if (!st.outstanding.erase(d.request)) return;
        st.last_progress = Clock::now();
        if (!d.ok) return finish(self, std::move(d.error));  // the remote part failed: so does the pass
        check_end(self);
      },
      [self](DrainDone& d) { on_drain_done(self, std::move(d)); },
      [self](ContextControl& c) {
        finish(self, c.reason.message.empty() ? task_error(self, ErrorKind::Autograd, "aborted") : c.reason);
      },
      [self](peer_down_atom, WorkerId w) {
        auto& st = self->state;
        bool involved = (st.start.first && st.start.first->from == w);
        for (auto& [req, o] : st.outstanding) involved = involved || o.to == w;
        if (involved)
          finish(self, task_error(self, ErrorKind::Unreachable,
                                  "worker " + st.rt->name_of(w) + " died during the backward pass"));
      },
      [self](sweep_atom) { watchdog(self); },
  };
}

}  // namespace

graph_task_actor spawn_graph_task(caf::local_actor* parent, AutogradRuntime& ar, context_actor context,
                                  TaskStart start) {
  // On the parent's thread, after its handler (D2 of Note [Actors run where
  // their messages arrive]).
  return parent->spawn(task_behavior, &ar, std::move(context), std::move(start));
}

}  // namespace castor::detail
