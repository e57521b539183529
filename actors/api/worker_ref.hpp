// WorkerRef: a worker named wherever the API takes one -- by its name, its
// rank or its WorkerInfo (`w.rpc_sync(1, f, x)`, `w.rpc_sync(info, f, x)`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "actors/api/worker_options.hpp"

namespace castor {

class WorkerRef {
 public:
  WorkerRef(std::string name) : name_(std::move(name)) {}
  WorkerRef(const char* name) : name_(name) {}
  WorkerRef(const WorkerInfo& info) : name_(info.name) {}
  template <class I, std::enable_if_t<std::is_integral<I>::value && !std::is_same<I, bool>::value, int> = 0>
  WorkerRef(I rank) : rank_(int64_t(rank)) {}

  /// The rank it was named by, if it was.
  const std::optional<int64_t>& rank() const { return rank_; }
  /// The name it was named by ("" when named by rank).
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::optional<int64_t> rank_;
};

}  // namespace castor
