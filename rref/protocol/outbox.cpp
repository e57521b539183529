// Outbox: retry with backoff, acks, dead peers (see outbox.hpp).
#include "rref/protocol/outbox.hpp"

#include <algorithm>

namespace castor::detail {

Outbox::Outbox(WorkerId self, TableGauge& unacked, RetryPolicy policy)
    : self_(self), unacked_(unacked), policy_(policy) {}

Transmission Outbox::post(const ControlToSend& c, time_point now) {
  RRefControl msg{ControlId(self_, next_id_++), c.op, c.rref, c.fork, self_};
  entries_.emplace(msg.id, Entry{c.to, msg, policy_.first, now + policy_.first});
  unacked_.add(1);
  return Transmission{c.to, std::move(msg)};
}

void Outbox::erase(std::unordered_map<ControlId, Entry>::iterator it) {
  entries_.erase(it);
  unacked_.add(-1);
}

std::optional<RRefControl> Outbox::acknowledge(ControlId id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  auto msg = std::move(it->second.msg);
  erase(it);
  return msg;
}

std::vector<Transmission> Outbox::due(time_point now) {
  std::vector<Transmission> out;
  for (auto& [id, e] : entries_) {
    if (e.next > now) continue;
    e.wait = std::min(e.wait * 2, policy_.max);
    e.next = now + e.wait;
    out.push_back(Transmission{e.to, e.msg});
  }
  return out;
}

void Outbox::peer_down(WorkerId rank) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (it->second.to == rank) erase(it);
    it = next;
  }
}

}  // namespace castor::detail
