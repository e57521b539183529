// PreparedCalls: incoming calls that involve RRefs, held back until they may
// run: until the owner confirmed every fork among their arguments that came
// from another user (so confirmed_by_owner() is true inside the function),
// and until every RRef passed where the function takes a value was fetched.
// Plain data, kept by the RRef context actor.
#pragma once

#include <optional>
#include <unordered_map>

#include "actors/api/errors.hpp"
#include "rref/protocol/fork_table.hpp"
#include "rref/rref_context.hpp"

namespace castor::detail {

/// A call that waits for nothing more, and the first failure among its waits.
struct ReadyCall {
  IncomingCall call;
  std::optional<ErrorInfo> failure;  // then it replies with this instead of running
};

class PreparedCalls {
 public:
  /// A new call, waiting for nothing yet.
  PreparedCallId add(IncomingCall call);
  /// The call `id`, still held; nothing once it was taken.
  IncomingCall* find(PreparedCallId id);

  /// `id` waits for one more thing (a fork's confirmation, a fetched value).
  void wait(PreparedCallId id);
  /// One thing `id` waited for arrived, or failed with `failure` (the first
  /// failure is kept). The call if it waits for nothing more (then it is no
  /// longer held here).
  std::optional<ReadyCall> done(PreparedCallId id, std::optional<ErrorInfo> failure = std::nullopt);
  /// The call if it waits for nothing (then it is no longer held here).
  std::optional<ReadyCall> take_if_ready(PreparedCallId id);

  size_t size() const { return calls_.size(); }

 private:
  struct Entry {
    IncomingCall call;
    int outstanding = 0;  // forks to confirm and values to fetch before it runs
    std::optional<ErrorInfo> failure;
  };
  std::unordered_map<PreparedCallId, Entry> calls_;  // add adds; done/take_if_ready remove
  PreparedCallId next_ = 1;                          // 0 is no call
};

}  // namespace castor::detail
