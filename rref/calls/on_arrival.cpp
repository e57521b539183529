// Calls served on arrival (see Note [Values on arrival] in on_arrival.hpp).
#include "rref/calls/on_arrival.hpp"

#include "rref/calls/remote_calls.hpp"
#include "rref/owner_index.hpp"
#include "rref/rref_counters.hpp"

namespace castor::detail {

void CreationJoin::counted(std::optional<ErrorInfo> failure) {
  failure_ = std::move(failure);
  arrive();
}

void CreationJoin::arrive() {
  // acq_rel: the last half sees what the first wrote (failure_).
  if (left_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  ack_(failure_ ? Outcome::failure(std::move(*failure_)) : Outcome::success(Value()));
}

bool starts_on_arrival(const CallRequest& req) {
  if (req.kind != CallKind::function || !req.is_remote()) return false;
  if (req.result_to.restarts > 0 || req.result_to.recipe) return false;  // Note [Restartable values]: the context's
  for (const auto& a : req.args)
    if (a.contains_rref()) return false;  // adopted and maybe fetched first (call_preparation.cpp)
  return true;
}

std::shared_ptr<CreationJoin> start_on_arrival(WorkerServices& rt, OwnerIndex& index, CallRequest& req,
                                               Completion ack) {
  auto holder = index.holder_for(req.result_to.rref_id);  // V1
  auto join = std::make_shared<CreationJoin>(std::move(ack));
  auto args = std::move(req.args);
  req.args.clear();
  CallRequest run = req;  // the context keeps `req`: who to count, the creation bound
  run.args = std::move(args);
  make_value(&rt, std::move(run), std::move(holder), [join](Outcome) { join->value_set(); });
  return join;
}

void answer_fetch(std::shared_ptr<Holder> holder, RRefId id, std::string owner_name,
                  std::shared_ptr<RRefCounters> counters, Completion done) {
  counters->pending_fetches.fetch_add(1);
  auto* h = holder.get();
  h->on_set([holder = std::move(holder), id, owner_name = std::move(owner_name), counters = std::move(counters),
             done = std::move(done)]() {
    counters->pending_fetches.fetch_sub(1);
    if (auto err = holder->error()) {
      done(Outcome::failure(no_value_error(id, owner_name, *err)));
    } else if (holder->holds_object()) {
      done(Outcome::failure(make_error(ErrorKind::Type, owner_name,
                                       "to_here on RRef " + to_string(id) + " of class '" + holder->cls()->name +
                                           "': an object stays on its owner, worker " + owner_name +
                                           " (call its methods instead)")));
    } else {
      done(Outcome::success(holder->value()));
    }
  });
}

}  // namespace castor::detail
