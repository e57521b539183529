// A simulated world for the RRef protocol's plain classes (rref/protocol/):
// a few workers, each with the tables the RRef context actor keeps (a
// ForkTable, an Outbox, an OwnerDirectory of OwnerForks), joined by a
// network that delays, reorders, duplicates and drops, on a simulated clock,
// with a seeded RNG. Each worker's handlers mirror the RRef context's
// (rref_context.cpp, adoption.cpp, call_preparation.cpp): they hand the
// event to the protocol classes and send what those return, so that the
// decisions under test are the production code's own.
//
// While it runs, the simulation checks Note [RRef protocol]'s promises and
// records each break in violations(): a value that ends while a live fork of
// it exists (held on a live worker, or in a message on its way to one), a
// call that runs with an unconfirmed fork or on a deleted value, an ended
// value made again. all_clear() says whether everything ended.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "rref/protocol/fork_table.hpp"
#include "rref/protocol/outbox.hpp"
#include "rref/protocol/owner_directory.hpp"
#include "rref/protocol/owner_forks.hpp"
#include "rref/rref_counters.hpp"
#include "rref/rref_state.hpp"

namespace castor::test::rref_sim {

using detail::RRefStatePtr;

/// Random faults of the network. Control messages and acks may be dropped
/// and duplicated (the outbox retries them); calls, which carry forks, are
/// never retried by castor and so only delayed. Every message waits a
/// random time in [min_delay_ms, max_delay_ms], which reorders them.
struct Faults {
  double drop = 0;
  double duplicate = 0;
  int min_delay_ms = 1;
  int max_delay_ms = 1;
};

/// A deterministic rule for the messages of one kind: "fork_request",
/// "child_accept", "user_delete", "ack", "call" (one carrying a fork),
/// "create" (remote()'s request), or "*" (every control message and ack).
/// The first matching rule applies.
struct Rule {
  std::string message;
  int drop_first = 0;  // drop the first N such messages
  int delay_ms = 0;    // hold each this much longer
  int copies = 1;      // send each this many times
  int copy_gap_ms = 0; // each further copy this much later than the one before
  WorkerId from = -1;  // only messages from this worker (-1: any)
  int seen = 0;        // matched so far
};

/// A handle in the test program's hands: an index into the simulation's
/// table of handles.
using Handle = size_t;

class Sim {
 public:
  Sim(int workers, uint64_t seed, Faults faults = {});
  ~Sim();
  Sim(const Sim&) = delete;
  Sim& operator=(const Sim&) = delete;

  void add_rule(Rule r) { rules_.push_back(std::move(r)); }

  // -- the program: what user code does ------------------------------------------

  /// make_rref on `on`: a value owned there, and its owner's handle.
  Handle make_rref(WorkerId on);
  /// remote() from `caller` to `owner`: the caller's handle at once (a fork
  /// made by the caller), the value made when the request arrives.
  Handle remote(WorkerId caller, WorkerId owner);
  /// `h`'s worker passes it in a call to `to`, whose function keeps it: the
  /// returned handle is there once the call ran.
  Handle share(Handle h, WorkerId to);
  /// `h`'s worker passes it in a call to `to` whose function takes the
  /// value, not the RRef (G3 of Note [RRef protocol]): a fork from a user is
  /// borrowed (fetched from the owner, never held); the returned handle has
  /// ran() once the function got the value, failed() if the fetch failed.
  /// Other sharing cases adopt the fork, as share() does.
  Handle borrow(Handle h, WorkerId to);
  /// The holder lets go of `h` (a handle not arrived yet: the function it
  /// is passed to will not keep it).
  void drop(Handle h);
  /// Worker `w` dies now; the others learn it after `detect_after_ms`.
  void kill(WorkerId w, int detect_after_ms = 10);

  // -- running ----------------------------------------------------------------------

  void run_for(int ms);
  /// Runs until nothing is in flight, no outbox holds anything and no timer
  /// is pending, or `max_ms` of simulated time pass. True if it got quiet.
  bool run_until_quiet(int max_ms = 120000);
  int64_t now_ms() const { return now_; }

  // -- what happened -------------------------------------------------------------------

  const std::vector<std::string>& violations() const { return violations_; }
  /// Nothing left on any live worker: no owner, no pending user or child, no
  /// prepared call, an empty outbox, and every gauge at zero. Else what is left.
  std::string leftovers() const;
  bool all_clear() const { return leftovers().empty(); }

  RRefId rref_of(Handle h) const { return handles_.at(h).rref; }
  WorkerId owner_of(Handle h) const { return handles_.at(h).owner; }
  /// The handle's state is here: its call arrived (and maybe waits), and it
  /// was not dropped.
  bool holds(Handle h) const { return handles_.at(h).state != nullptr; }
  /// Runs until `h`'s call arrived (or failed), at most `max_ms`.
  void run_until_arrived(Handle h, int max_ms = 10000);
  /// The call that carried `h` ran (its fork usable) / failed.
  bool ran(Handle h) const { return handles_.at(h).ran; }
  bool failed(Handle h) const { return handles_.at(h).failed; }
  /// Whether `h`'s fork was confirmed by the owner when its call ran.
  bool confirmed_when_ran(Handle h) const { return handles_.at(h).confirmed_when_ran; }
  /// The value `h` refers to ended on its owner.
  bool ended(Handle h) const;
  /// The owner's accounting of `h`'s value, or nothing once it ended.
  const detail::OwnerForks* owner_forks(Handle h);
  bool creator_died(Handle h) const;

  const detail::ForkTable& forks_of(WorkerId w) const { return *workers_.at(size_t(w))->forks; }
  const detail::Outbox& outbox_of(WorkerId w) const { return *workers_.at(size_t(w))->outbox; }
  const detail::RRefCounters& counters_of(WorkerId w) const { return workers_.at(size_t(w))->counters; }

  struct Stats {
    int sent = 0, dropped = 0, duplicated = 0, delivered = 0, resent = 0;
  };
  const Stats& stats() const { return stats_; }
  /// Messages of one kind (kind_name's names) sent so far, retries included.
  int sent_of(const std::string& kind) const {
    auto it = sent_by_kind_.find(kind);
    return it == sent_by_kind_.end() ? 0 : it->second;
  }

 private:
  struct SimOwner {
    std::shared_ptr<detail::OwnerStats> stats;
    std::unique_ptr<detail::OwnerForks> forks;
    bool creator_died = false;
  };

  struct Dropped {  // a StateDropped event in a worker's context mailbox
    RRefId rref;
    ForkId fork;
    WorkerId owner = -1;
    bool owner_side = false;
  };

  struct PendingCall {  // PreparedCalls' entry
    Handle handle = 0;
    int outstanding = 0;
    bool failed = false;
    // G3: a borrowed fork's fetch is out; its child_accept leaves with the answer.
    std::optional<detail::ControlToSend> release;
    RRefForkData borrowed;
  };

  struct Worker {
    WorkerId rank = -1;
    bool alive = true;
    std::set<WorkerId> known_dead;  // peer_down arrived
    detail::RRefCounters counters;
    std::unique_ptr<detail::ForkTable> forks;
    std::unique_ptr<detail::Outbox> outbox;
    detail::OwnerDirectory<SimOwner> owners;
    std::set<RRefId> ended;                            // values that ended here
    std::deque<Dropped> dropped;                               // handles' ends, not handled yet
    std::unordered_map<detail::PreparedCallId, PendingCall> calls;  // calls waiting for their fork
    detail::PreparedCallId next_call = 1;
    uint64_t next_rref = 1, next_fork = 1;
    std::vector<std::weak_ptr<detail::RRefState>> states;  // every state made here
  };

  struct HandleSlot {
    WorkerId worker = -1;
    RRefId rref;
    WorkerId owner = -1;
    RRefStatePtr state;  // null until its call ran, and once dropped
    bool arrived = false, ran = false, failed = false, confirmed_when_ran = false;
    bool drop_requested = false;
  };

  struct Message {
    // fetch: a borrower's to_here (a call: never dropped); value: its answer.
    enum class Kind { control, ack, call, fetch, value } kind = Kind::control;
    WorkerId from = -1, to = -1;
    RRefControl control;
    RRefControlAck ack;
    RRefForkData fork;     // call: the fork it carries, or remote()'s result_to
    bool creates = false;  // call: remote()'s request, which creates the value
    Handle slot = 0;       // call: the handle the receiver's function keeps
    bool borrows = false;  // call: the function takes the value (G3)
    detail::PreparedCallId call = 0;  // fetch, value: the borrower's waiting call
    bool ok = false;                  // value: the owner had it
  };

  // The network.
  void post(Message m);
  void deliver(Message& m);
  std::string kind_name(const Message& m) const;
  Rule* rule_for(const Message& m);

  // Each worker's handlers (mirroring the RRef context actor).
  void send_control(Worker& w, const detail::ControlToSend& c);
  void transmit(Worker& w, const detail::Transmission& t);
  SimOwner* owner_slot(Worker& w, RRefId id, bool make);
  bool to_owner(Worker& w, const detail::OwnerEvent& e);
  void maybe_end(Worker& w, RRefId id);
  void on_control(Worker& w, const RRefControl& msg);
  void on_ack(Worker& w, const RRefControlAck& ack);
  void on_call(Worker& w, const Message& m);
  bool borrow_on_arrival(Worker& w, const Message& m);
  void on_fetch(Worker& w, const Message& m);
  void on_value(Worker& w, const Message& m);
  void end_borrow(Worker& w, detail::PreparedCallId call, bool failed);
  Handle pass(Handle h, WorkerId to, bool borrows);
  void on_dropped(Worker& w, const Dropped& d);
  void on_peer_down(Worker& w, WorkerId rank);
  void release(Worker& w, const detail::Released& r);
  void call_done(Worker& w, detail::PreparedCallId call, bool failed);
  void run_if_ready(Worker& w, detail::PreparedCallId call);
  void settle();  // handles every queued StateDropped

  RRefStatePtr new_user_state(Worker& w, RRefId id, WorkerId owner, ForkId fork);
  RRefStatePtr new_owner_state(Worker& w, RRefId id);
  RRefStatePtr track(Worker& w, detail::RRefState* s);
  Handle new_handle(WorkerId w, RRefId id, WorkerId owner);
  bool live_fork_exists(RRefId id, std::string& where) const;
  bool quiet() const;
  void step_to(int64_t until);
  detail::Outbox::time_point clock() const;
  void violation(std::string what);

  bool tearing_down_ = false;  // set first in ~Sim: ends of states no longer count
  std::mt19937_64 rng_;
  Faults faults_;
  std::vector<Rule> rules_;
  int64_t now_ = 0;
  int64_t next_tick_ = 0;
  uint64_t seq_ = 0;
  std::map<std::pair<int64_t, uint64_t>, Message> in_flight_;
  std::multimap<int64_t, std::function<void()>> timers_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<HandleSlot> handles_;
  std::vector<std::string> violations_;
  Stats stats_;
  std::map<std::string, int> sent_by_kind_;
};

}  // namespace castor::test::rref_sim
