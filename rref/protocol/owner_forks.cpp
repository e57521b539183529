// OwnerForks: the owner's fork accounting (see owner_forks.hpp and Note
// [RRef protocol] in rref/rref_context.hpp).
#include "rref/protocol/owner_forks.hpp"

namespace castor::detail {

OwnerForks::OwnerForks(WorkerId creator, TableGauge& worker_forks, TableGauge& value_forks)
    : creator_(creator), worker_forks_(worker_forks), value_forks_(value_forks) {}

OwnerForks::Outcome OwnerForks::apply(const OwnerEvent& e) {
  switch (e.kind) {
    case OwnerEvent::Kind::add_fork:
      add_fork(e.fork, e.worker);
      break;
    case OwnerEvent::Kind::del_fork:
      del_fork(e.fork);
      break;
    case OwnerEvent::Kind::local_ref:
      local_ref(e.delta);
      break;
    case OwnerEvent::Kind::created:
      created(e.fork, e.worker);
      break;
    case OwnerEvent::Kind::peer_down:
      return peer_down(e.worker);
  }
  return Outcome::none;
}

void OwnerForks::count(int64_t delta) {
  worker_forks_.add(delta);
  value_forks_.add(delta);
}

void OwnerForks::add_fork(ForkId fork, WorkerId holder) {
  // Idempotence: a repeated add, or one whose delete came first, changes nothing.
  if (deleted_.count(fork) || forks_.count(fork)) return;
  forks_.emplace(fork, holder);
  count(1);
}

void OwnerForks::del_fork(ForkId fork) {
  // Remembered even when the add has not arrived yet: it is cancelled then.
  deleted_.insert(fork);
  if (forks_.erase(fork)) count(-1);
}

void OwnerForks::created(ForkId caller_fork, WorkerId caller) {
  // remote(): the caller made its fork before the request left; counting it
  // with the creation means the value cannot end before the caller lets go.
  if (caller_fork.valid()) add_fork(caller_fork, caller);
  created_ = true;
}

OwnerForks::Outcome OwnerForks::peer_down(WorkerId rank) {
  for (auto it = forks_.begin(); it != forks_.end();) {
    if (it->second == rank) {
      deleted_.insert(it->first);
      it = forks_.erase(it);
      count(-1);
    } else {
      ++it;
    }
  }
  if (!created_ && creator_ == rank) {
    // The creator died before its request arrived: nothing will create us.
    created_ = true;
    return Outcome::creator_died;
  }
  return Outcome::none;
}

}  // namespace castor::detail
