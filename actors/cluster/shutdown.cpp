// Graceful shutdown: distributed termination detection, coordinated by rank 0.
#include <cstdio>
#include <cstdlib>

#include <caf/typed_event_based_actor.hpp>

#include "actors/runtime/runtime.hpp"
#include "actors/runtime/worker_state.hpp"

namespace castor::detail {

// Note [Graceful shutdown]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A worker that calls shutdown() keeps serving until every worker has called
// it and no work is left anywhere, including calls started by calls. Rank 0
// coordinates (Mattern's four-counter method):
//
//  S1. Each worker, on its ShutdownCommand, tells rank 0 (shutdown_atom).
//  S2. Once every rank has entered, rank 0 runs termination waves: it asks
//      each worker for its report (probe_atom, round): the counted messages
//      it ever sent and handled, and whether it is idle (no request running,
//      queued or awaiting a reply, no executor task, no call of its own in
//      flight).
//  S3. The world is terminated when two consecutive waves both see every
//      worker idle with sum(sent) == sum(received), and the totals did not
//      change between them. One wave alone is not enough: a message sent
//      after its sender reported but handled before its receiver reported
//      can balance the sums while another message is still in transit.
//  S4. Rank 0 then tells every worker (done_atom), waits for their answers,
//      and finishes itself last, so nobody loses rank 0 while waiting. A
//      worker that leaves after its answer is no failure.
//  S5. A worker answers before it finishes, and a worker whose connection
//      ends while rank 0 waits counts as answered. Finishing lets the app's
//      shutdown() return and its process end, which may close the
//      connection before CAF has written an answer sent later; rank 0 then
//      waited out the request's 5 s bound. (Answering first only queues the
//      answer sooner; one that never reaches the wire is covered by the
//      connection's end.) Once rank 0 finishes, no wave runs or counts any
//      more, and its decision (done, or the deadline's error) stands.
//      Measured, worlds of 128 on 2 cores: 6 shutdowns of 11 took 5.0-6.1 s,
//      the others 1.3-2.2 s; with S5, 12 of 12 took 1.4-2.6 s.
//
// Counted messages are those that carry work: CallRequest and CallReply
// (more in later layers). A request counts as received when its handler
// runs and stays "in flight" until its reply is counted as sent, so a worker
// busy with a call is never idle. RRef control messages are not counted:
// their sender is not idle until their ack arrives, and an owner that still
// has forks keeps its worker from being idle. Every worker releases its own
// RRefs during the waves, when it reports with no call running (not when it
// enters shutdown: peers still running may call it and pass it RRefs).
//
// A dead peer ends the shutdown with an error, decided by rank 0: rank 0
// fails as soon as it is in shutdown and knows a peer dead, and then leaves;
// the others fail when they lose rank 0. A worker waiting in shutdown that
// loses another worker keeps serving: rank 0 may still be running its app
// and calling it (the survivors of a lost worker carry on), and a worker that
// left after its done_atom is no failure at all. Rank 0 monitors every peer,
// so it learns of the death itself, or its probe to the dead one fails.

// Note [Shutdown bound]
// ~~~~~~~~~~~~~~~~~~~~~
// A call stuck in user code (a sleep of ten minutes) keeps its worker from
// ever being idle, so the waves above would wait forever (PyTorch hangs
// here too, its #63247). castor bounds it:
//  B1. Rank 0 arms one timer, WorkerOptions::shutdown_timeout, once every
//      worker has entered shutdown. Waiting for the others to enter is not
//      bounded: they may still be running the app that rank 0's calls feed.
//  B2. Every report carries the calls its worker is serving (RunningCalls:
//      function, caller, since when). When the timer fires before the waves
//      agree, rank 0 tells every peer (deadline_atom, with the running calls
//      of the last reports), waits for their answers as in S4, and fails its
//      own shutdown with a TimeoutError that names each call. A peer fails
//      its shutdown with the same text. Calls that finish in time are
//      waited for as always: only the bound ends the wait.
//  B3. A shutdown that failed (B2, or a lost peer) still tears the worker
//      down. The executor waits for user code only until the bound has
//      passed (E5 of Note [Executor sizing]), then leaves its threads
//      behind; the Runtime is then never freed, and the reply gate
//      (Runtime::teardown_gate) drops whatever such code answers later, so
//      nothing touches an actor system that is gone. The process can exit.

// Note [Shutdown with survivors]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Without a failure handler, a dead worker fails rank 0's shutdown (above).
// A death the app took in charge (F3 of Note [Failure handlers]: a handler
// of on_worker_failure was registered on rank 0) excuses the dead worker
// instead, and the survivors end the job among themselves. Rank 0 is never
// excused: it coordinates.
//  V1. Rank 0 waits for every worker not excused to enter (S1), probes only
//      those (S2) and leaves the excused out of S4 and of the bound (B2).
//  V2. The counters of the dead cannot balance: what was sent to it was
//      never handled, and its own counts died with it. With a worker
//      excused, S3 drops the sums and keeps the rest: two consecutive waves
//      with every survivor idle and the survivors' totals unchanged. A call
//      still travels only while its caller waits for the reply (a pending
//      call keeps its worker from being idle), so idleness alone still
//      covers every call between survivors; calls to or from the dead were
//      failed by liveness or lose their reply.
//  V3. A worker excused during a wave ends that wave, whose report from it
//      would never come; the next wave starts at once, and the stale
//      reports of the old round are ignored.
//  V4. A worker that died and rejoined (Note [Rejoin]) must enter again in
//      its new life (its old life's entry is forgotten: RJ3), and the sums
//      are dropped as in V2, for the same reason: its first life's counts
//      died with it.

namespace {

constexpr auto kProbeTimeout = std::chrono::seconds(30);
constexpr auto kWavePause = std::chrono::milliseconds(2);
constexpr auto kAnswerBound = std::chrono::seconds(5);  // S4: a peer silent this long counts as answered

bool is_coordinator(worker_pointer self) { return self->state.rt->rank() == 0; }

// Note [Shutdown with survivors]: a dead worker whose death the app took in
// charge; never rank 0.
bool excused(worker_pointer self, WorkerId r) {
  const auto* rt = self->state.rt;
  return r != 0 && !rt->world().alive(r) && rt->failures.taken_in_charge(r);
}

bool any_excused(worker_pointer self) {
  for (size_t r = 0; r < self->state.peers.size(); ++r)
    if (excused(self, WorkerId(r))) return true;
  return false;
}

// S1 and V1: every worker not excused has entered shutdown.
bool all_entered(worker_pointer self) {
  const auto& st = self->state;
  for (size_t r = 0; r < st.peers.size(); ++r)
    if (!st.shutdown.entered.count(WorkerId(r)) && !excused(self, WorkerId(r))) return false;
  return true;
}

void on_report(worker_pointer self, TerminationReport report);

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

std::vector<std::string> running_calls_here(const Runtime& rt) {
  std::vector<std::string> out;
  auto now = std::chrono::steady_clock::now();
  for (const auto& c : rt.running.snapshot()) out.push_back(describe_running_call(rt, c, now));
  return out;
}

std::string deadline_message(const Runtime& rt, const std::string& summary) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f", std::chrono::duration<double>(rt.opts.shutdown_timeout).count());
  return "graceful shutdown of " + rt.name() + " did not finish within " + seconds +
         " s (WorkerOptions::shutdown_timeout): " + summary;
}

// S4, S5: the one place that counts a peer's answer (or its end) once.
void peer_answered(worker_pointer self, WorkerId rank) {
  auto& sd = self->state.shutdown;
  if (sd.awaiting.erase(rank) == 1 && sd.awaiting.empty()) finish_shutdown_impl(self, sd.finish_error);
}

// S4 (and B2 with the deadline's message): tells every usable peer how the
// shutdown ends and finishes rank 0 once each has answered or is gone.
template <class... Ts>
void tell_peers_then_finish(worker_pointer self, std::optional<ErrorInfo> error, const Ts&... message) {
  auto& st = self->state;
  auto& sd = st.shutdown;
  if (sd.finishing) return;  // once: the first decision (done, or the deadline) stands
  sd.finishing = true;
  sd.finish_error = std::move(error);
  sd.awaiting.clear();
  for (size_t r = 0; r < st.peers.size(); ++r)
    if (WorkerId(r) != st.rt->rank() && peer_usable(self, WorkerId(r))) sd.awaiting.insert(WorkerId(r));
  if (sd.awaiting.empty()) {
    finish_shutdown_impl(self, sd.finish_error);
    return;
  }
  for (WorkerId rank : sd.awaiting)  // answers come as later messages: the set does not change here
    self->request(st.peers[size_t(rank)]->handle, kAnswerBound, message...)
        .then([self, rank](bool) { peer_answered(self, rank); },
              [self, rank](caf::error&) { peer_answered(self, rank); });
}

void evaluate_wave(worker_pointer self) {
  auto& sd = self->state.shutdown;
  uint64_t sent = 0, received = 0;
  bool idle = true;
  for (const auto& r : sd.reports) {
    sent += r.sent;
    received += r.received;
    idle = idle && r.idle;
  }
  sd.wave_running = false;
  if (std::getenv("CASTOR_DEBUG_SHUTDOWN"))
    for (const auto& r : sd.reports)
      std::fprintf(stderr, "wave %lld rank %d sent %llu received %llu idle %d\n", (long long)r.round, int(r.rank),
                   (unsigned long long)r.sent, (unsigned long long)r.received, int(r.idle));
  // V2, and V4: a rejoined worker's earlier life took its counts with it.
  bool balanced = idle && (sent == received || any_excused(self) || self->state.rt->world().any_rejoined());
  if (balanced && sd.have_previous && sent == sd.previous_sent && received == sd.previous_received) {
    tell_peers_then_finish(self, std::nullopt, done_atom::value);
    return;
  }
  sd.have_previous = balanced;
  sd.previous_sent = sent;
  sd.previous_received = received;
  self->delayed_send(self, kWavePause, probe_atom::value);
}

void on_report(worker_pointer self, TerminationReport report) {
  auto& sd = self->state.shutdown;
  if (report.round != sd.round || !sd.wave_running || sd.finishing) return;  // S5: the waves are over
  sd.running[report.rank] = report.running;  // B2
  sd.reports.push_back(report);
  if (sd.reports.size() == sd.reports_expected) evaluate_wave(self);
}

}  // namespace

void begin_shutdown_impl(worker_pointer self, ShutdownCommand&& cmd) {
  auto& st = self->state;
  auto* rt = st.rt;
  if (rt->state.load() == RunState::stopped || st.shutdown.requested) {
    if (cmd.done) cmd.done(std::nullopt);
    return;
  }
  st.shutdown.requested = true;
  st.shutdown.done = std::move(cmd.done);
  if (!cmd.graceful) {
    finish_shutdown_impl(self, std::nullopt);
    return;
  }
  rt->state.store(RunState::shutting_down);
  // Local RRefs are not released here: other workers may still call into
  // this one, and what those calls create or pass must stay usable. They
  // are released by the termination waves (local_report_impl), once every
  // worker has entered shutdown and no call runs here.
  for (size_t r = 0; r < st.peers.size(); ++r)
    if (WorkerId(r) != rt->rank() && !peer_usable(self, WorkerId(r)) && (is_coordinator(self) || r == 0) &&
        !excused(self, WorkerId(r))) {
      fail_shutdown_impl(self, WorkerId(r));
      return;
    }
  if (is_coordinator(self))
    on_shutdown_entered_impl(self, rt->rank());
  else
    self->send(st.peers[0]->handle, shutdown_atom::value, rt->rank());
}

void on_shutdown_entered_impl(worker_pointer self, WorkerId rank) {
  auto& st = self->state;
  if (!is_coordinator(self)) return;
  st.shutdown.entered.insert(rank);
  if (!st.shutdown.requested || !all_entered(self)) return;  // rank 0 enters last or first: both work
  if (!st.shutdown.deadline_armed) {  // B1
    st.shutdown.deadline_armed = true;
    self->delayed_send(self, st.rt->opts.shutdown_timeout, deadline_atom::value);
  }
  if (!st.shutdown.wave_running) start_wave_impl(self);
}

void start_wave_impl(worker_pointer self) {
  auto& st = self->state;
  auto& sd = st.shutdown;
  if (!is_coordinator(self) || sd.wave_running || sd.finishing || st.rt->state.load() == RunState::stopped) return;
  sd.wave_running = true;
  sd.round += 1;
  sd.reports.clear();
  sd.reports_expected = 1;
  auto round = sd.round;
  for (size_t r = 0; r < st.peers.size(); ++r) {
    if (WorkerId(r) == st.rt->rank() || excused(self, WorkerId(r))) continue;  // V1
    ++sd.reports_expected;
    self->request(st.peers[r]->handle, kProbeTimeout, probe_atom::value, round)
        .then([self](TerminationReport& rep) { on_report(self, std::move(rep)); },
              [self, r](caf::error&) { on_peer_lost_during_shutdown_impl(self, WorkerId(r)); });
  }
  on_report(self, local_report_impl(self, round));
}

TerminationReport local_report_impl(worker_pointer self, int64_t round) {
  auto& st = self->state;
  auto* rt = st.rt;
  TerminationReport rep;
  rep.round = round;
  rep.rank = rt->rank();
  // Read `in_flight` and the executor before the counters: a reply counted
  // after these reads shows up as an imbalance or as a change next wave.
  bool calls_idle = rt->counters.in_flight.load() == 0 && rt->executor->idle() && rt->pending.empty();
  bool rrefs_idle = !rt->rrefs || rt->rrefs->idle();
  // Every worker has entered shutdown (probes start only then) and no code
  // runs here: the RRefs this worker still holds (its user's, or kept by
  // user data that nothing will drop any more) are released. A holder whose
  // own worker is idle still keeps its owner busy, so this is not limited to
  // workers whose RRef runtime is busy.
  if (calls_idle && rt->rrefs) rt->rrefs->on_shutdown_begin();
  bool idle = calls_idle && rrefs_idle && (!rt->autograd || rt->autograd->idle());
  rep.sent = rt->counters.sent.load();
  rep.received = rt->counters.received.load();
  rep.idle = idle;
  if (!idle) rep.running = running_calls_here(*rt);  // B2
  return rep;
}

void finish_shutdown_impl(worker_pointer self, std::optional<ErrorInfo> error) {
  auto& st = self->state;
  auto* rt = st.rt;
  rt->state.store(RunState::stopped);
  fail_pending_impl(
      self, [](const PendingCall&) { return true; },
      [rt](const PendingCall& c) {
        return make_error(ErrorKind::Shutdown, rt->name(),
                          "worker " + rt->name() + " shut down before '" + c.function + "' on " + rt->name_of(c.to) +
                              " answered");
      });
  if (auto done = std::move(st.shutdown.done)) {
    st.shutdown.done = nullptr;
    done(std::move(error));
  }
}

void on_peer_lost_during_shutdown_impl(worker_pointer self, WorkerId rank) {
  auto& st = self->state;
  auto* rt = st.rt;
  if (st.shutdown.finishing) {
    // S5: it left before its answer came. (A probe of an earlier wave that
    // failed while the peer lives is no answer.)
    if (!peer_usable(self, rank)) peer_answered(self, rank);
    return;
  }
  if (!st.shutdown.requested || rt->state.load() == RunState::stopped) return;
  // Another worker lost: rank 0 decides (Note [Graceful shutdown]).
  if (!is_coordinator(self) && rank != 0) return;
  if (!excused(self, rank)) {
    fail_shutdown_impl(self, rank);
    return;
  }
  // V3: the survivors go on without it; the wave that waits for it ends.
  auto& sd = st.shutdown;
  sd.wave_running = false;
  sd.have_previous = false;
  on_shutdown_entered_impl(self, rt->rank());
}

void fail_shutdown_impl(worker_pointer self, WorkerId rank) {
  auto& st = self->state;
  auto* rt = st.rt;
  if (!st.shutdown.requested || st.shutdown.finishing || rt->state.load() == RunState::stopped) return;
  auto who = rt->name_of(rank);
  auto running = join(running_calls_here(*rt));
  finish_shutdown_impl(self, make_error(ErrorKind::Unreachable, who,
                                        "graceful shutdown of " + rt->name() + " failed: worker " + who +
                                            " is unreachable" + (running.empty() ? "" : "; still running: " + running)));
}

void on_shutdown_deadline_impl(worker_pointer self) {
  auto& st = self->state;
  auto& sd = st.shutdown;
  auto* rt = st.rt;
  if (!is_coordinator(self) || !sd.requested || sd.finishing || rt->state.load() == RunState::stopped) return;
  // B2: what the last reports said, and what runs here now.
  sd.running[rt->rank()] = running_calls_here(*rt);
  std::vector<std::string> all;
  for (const auto& [rank, calls] : sd.running) all.insert(all.end(), calls.begin(), calls.end());
  auto summary = all.empty() ? std::string("no call is running, but the workers did not agree that all work had ended")
                             : "still running: " + join(all);
  tell_peers_then_finish(self, make_error(ErrorKind::Timeout, rt->name(), deadline_message(*rt, summary)),
                         deadline_atom::value, summary);
}

void on_shutdown_deadline_from_coordinator_impl(worker_pointer self, const std::string& summary) {
  auto& st = self->state;
  auto* rt = st.rt;
  if (!st.shutdown.requested || st.shutdown.finishing || rt->state.load() == RunState::stopped) return;
  finish_shutdown_impl(self, make_error(ErrorKind::Timeout, rt->name(), deadline_message(*rt, summary)));
}

}  // namespace castor::detail
