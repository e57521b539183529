#include "actors/cluster/failure_handlers.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>

namespace castor {

std::string WorkerFailure::message() const {
  return "worker " + worker.name + " (rank " + std::to_string(worker.id) + ") died: " + cause;
}

}  // namespace castor

namespace castor::detail {

void FailureHandlers::dispatch(const std::shared_ptr<const WorkerFailureHandler>& handler,
                               const WorkerFailure& failure, const CallbackRunner& run) {
  run([handler, failure] {  // F2
    try {
      (*handler)(failure);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "castor: a failure handler threw for %s: %s\n", failure.message().c_str(), e.what());
    } catch (...) {
      std::fprintf(stderr, "castor: a failure handler threw a non-standard exception for %s\n",
                   failure.message().c_str());
    }
  });
}

FailureHandlerId FailureHandlers::add(WorkerFailureHandler handler, std::optional<WorkerId> only,
                                      const CallbackRunner& run) {
  auto shared = std::make_shared<const WorkerFailureHandler>(std::move(handler));
  std::vector<WorkerFailure> past;
  FailureHandlerId id;
  {
    std::lock_guard<std::mutex> lock(mtx_);
    id = next_id_++;
    handlers_.emplace(id, Entry{shared, only});
    for (const auto& d : deaths_)  // F1: deaths before the registration
      if (!only || *only == WorkerId(d.worker.id)) {
        past.push_back(d);
        if (!only) in_charge_.insert(WorkerId(d.worker.id));
      }
  }
  for (const auto& d : past) dispatch(shared, d, run);
  return id;
}

bool FailureHandlers::remove(FailureHandlerId id) {
  std::lock_guard<std::mutex> lock(mtx_);
  return handlers_.erase(id) > 0;
}

void FailureHandlers::on_death(const WorkerFailure& failure, const CallbackRunner& run) {
  auto rank = WorkerId(failure.worker.id);
  std::vector<std::shared_ptr<const WorkerFailureHandler>> covering;
  {
    std::lock_guard<std::mutex> lock(mtx_);
    deaths_.push_back(failure);
    for (const auto& [id, e] : handlers_)
      if (!e.only || *e.only == rank) {
        covering.push_back(e.handler);
        if (!e.only) in_charge_.insert(rank);  // F3
      }
  }
  for (const auto& h : covering) dispatch(h, failure, run);
}

void FailureHandlers::on_rejoin(WorkerId rank) {
  std::lock_guard<std::mutex> lock(mtx_);
  deaths_.erase(std::remove_if(deaths_.begin(), deaths_.end(),
                               [&](const WorkerFailure& d) { return WorkerId(d.worker.id) == rank; }),
                deaths_.end());
  in_charge_.erase(rank);
}

bool FailureHandlers::taken_in_charge(WorkerId rank) const {
  std::lock_guard<std::mutex> lock(mtx_);
  return in_charge_.count(rank) > 0;
}

size_t FailureHandlers::size() const {
  std::lock_guard<std::mutex> lock(mtx_);
  return handlers_.size();
}

}  // namespace castor::detail
