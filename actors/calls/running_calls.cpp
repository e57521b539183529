#include "actors/calls/running_calls.hpp"

#include <algorithm>

namespace castor::detail {

uint64_t RunningCalls::begin(std::string function, WorkerId caller) {
  std::lock_guard<std::mutex> lock(mtx_);
  auto ticket = ++next_;
  running_.emplace(ticket, Entry{std::move(function), caller, Clock::now()});
  return ticket;
}

void RunningCalls::end(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mtx_);
  running_.erase(ticket);
}

std::vector<RunningCalls::Entry> RunningCalls::snapshot() const {
  std::vector<Entry> out;
  {
    std::lock_guard<std::mutex> lock(mtx_);
    out.reserve(running_.size());
    for (const auto& [ticket, e] : running_) out.push_back(e);
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.since < b.since; });
  return out;
}

}  // namespace castor::detail
