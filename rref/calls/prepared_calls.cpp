// PreparedCalls (see prepared_calls.hpp).
#include "rref/calls/prepared_calls.hpp"

namespace castor::detail {

PreparedCallId PreparedCalls::add(IncomingCall call) {
  auto id = next_++;
  calls_.emplace(id, Entry{std::move(call), 0, std::nullopt});
  return id;
}

IncomingCall* PreparedCalls::find(PreparedCallId id) {
  auto it = calls_.find(id);
  return it == calls_.end() ? nullptr : &it->second.call;
}

void PreparedCalls::wait(PreparedCallId id) {
  auto it = calls_.find(id);
  if (it != calls_.end()) ++it->second.outstanding;
}

std::optional<ReadyCall> PreparedCalls::done(PreparedCallId id, std::optional<ErrorInfo> failure) {
  auto it = calls_.find(id);
  if (it == calls_.end()) return std::nullopt;
  if (failure && !it->second.failure) it->second.failure = std::move(failure);
  --it->second.outstanding;
  return take_if_ready(id);
}

std::optional<ReadyCall> PreparedCalls::take_if_ready(PreparedCallId id) {
  auto it = calls_.find(id);
  if (it == calls_.end() || it->second.outstanding > 0) return std::nullopt;
  ReadyCall out{std::move(it->second.call), std::move(it->second.failure)};
  calls_.erase(it);
  return out;
}

}  // namespace castor::detail
