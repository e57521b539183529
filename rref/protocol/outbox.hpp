// Outbox: this worker's control messages of Note [RRef protocol] (in
// rref/rref_context.hpp) that await their ack, resent with backoff. Plain
// data: no actor, no thread, no clock (the time is passed in), so that unit
// tests drive it; the RRef context actor transmits what it returns.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "messages/rref_proto.hpp"
#include "rref/protocol/table_gauge.hpp"

namespace castor::detail {

/// A control message a protocol step wants sent; it goes through the outbox,
/// which retries it until acknowledged.
struct ControlToSend {
  WorkerId to = -1;
  RRefOp op = RRefOp::fork_request;
  RRefId rref;
  ForkId fork;
};

/// One copy of a control message on its way to worker `to`.
struct Transmission {
  WorkerId to = -1;
  RRefControl msg;
};

/// When unacknowledged messages are resent.
struct RetryPolicy {
  std::chrono::milliseconds first{50};  // the first resend, this long after the send
  std::chrono::milliseconds max{2000};  // each wait doubles, up to this
  std::chrono::milliseconds tick{25};   // how often the actor asks what is due
};

class Outbox {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  /// `unacked` is the gauge this outbox keeps equal to its size (and the
  /// only one that changes it).
  Outbox(WorkerId self, TableGauge& unacked, RetryPolicy policy = {});
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  /// A new control message from this worker, with a ControlId of its own:
  /// kept until acknowledged. Returns the copy to transmit now.
  Transmission post(const ControlToSend& c, time_point now);

  /// An ack arrived: the message it acknowledges, or nothing when that one
  /// was acknowledged already or dropped (a repeated or late ack is harmless).
  std::optional<RRefControl> acknowledge(ControlId id);

  /// The messages whose resend is due at `now`; each then waits twice as
  /// long as before (up to policy().max) for its next resend.
  std::vector<Transmission> due(time_point now);

  /// Worker `rank` died: what was meant for it is dropped, since no ack will
  /// come (the peer's side of the protocol counts it as gone instead).
  void peer_down(WorkerId rank);

  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  const RetryPolicy& policy() const { return policy_; }

 private:
  struct Entry {
    WorkerId to = -1;
    RRefControl msg;
    std::chrono::milliseconds wait{0};  // until the next resend; doubled at each
    time_point next;                    // the next resend
  };

  void erase(std::unordered_map<ControlId, Entry>::iterator it);

  const WorkerId self_;
  TableGauge& unacked_;  // == entries_.size(), changed only beside entries_
  const RetryPolicy policy_;
  uint64_t next_id_ = 1;  // ControlIds are unique per sender: acks name them, receivers dedupe by them
  // Changed by post (added), acknowledge and peer_down (removed), due (next resend).
  std::unordered_map<ControlId, Entry> entries_;
};

}  // namespace castor::detail
