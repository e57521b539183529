// What `castor inspect` and the metrics port show of one worker: plain
// structs filled by each layer (rref/, engine/) and by the runtime, turned
// into JSON or Prometheus text by actors/inspection.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace castor::detail {

class Runtime;

/// An OwnerRRef on this worker.
struct OwnedRRefInfo {
  std::string id;    // "worker.local" as in the protocol's ids
  std::string type;  // "Tensor[float32 2x3]", a class name, "pending", "error"
  int64_t bytes = 0;  // tensor bytes held (0 for objects and scalars)
  int64_t forks = 0;  // forks other workers hold
  int64_t age_ms = 0;
};

/// A fork here that its owner has not confirmed yet.
struct PendingUserInfo {
  std::string id;
  std::string fork;
  std::string owner;  // worker name
  int64_t age_ms = 0;
};

struct RRefInspection {
  std::vector<OwnedRRefInfo> owned;
  std::vector<PendingUserInfo> pending_users;
};

/// A distributed autograd context known here.
struct AutogradContextInfo {
  std::string id;
  int64_t age_ms = 0;
};

struct AutogradInspection {
  std::vector<AutogradContextInfo> contexts;
};

/// A snapshot of one worker as JSON text (see actors/observe/inspection.cpp for the
/// fields). Thread-safe; never blocks on an actor.
std::string inspection_json(Runtime& rt);

/// The same counters in Prometheus' text exposition format.
std::string prometheus_text(Runtime& rt);

}  // namespace castor::detail
