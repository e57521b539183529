// Fault injection for tests: a worker can drop, delay, duplicate or reorder
// the control messages it sends (RRef protocol messages and their acks).
// User calls are never affected: they are never retried. Off by default.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace castor {

struct FaultRule {
  std::string message;                  // "fork_request", "child_accept", "user_delete", "ack", or "*"
  int drop_first = 0;                   // drop the first N such messages
  double drop_probability = 0;          // then drop each with this probability
  std::chrono::milliseconds delay{0};   // hold each for this long
  double duplicate_probability = 0;     // send a second copy
  double reorder_probability = 0;       // hold it for a random 0..reorder_window
  std::chrono::milliseconds reorder_window{20};
};

struct FaultInjection {
  std::vector<FaultRule> rules;
  uint64_t seed = 1;
  bool enabled() const { return !rules.empty(); }
};

namespace detail {

/// What to do with one outgoing message.
struct FaultPlan {
  bool drop = false;
  int copies = 1;
  std::chrono::milliseconds delay{0};
};

class FaultInjector {
 public:
  explicit FaultInjector(FaultInjection cfg = {}) : cfg_(std::move(cfg)), rng_(cfg_.seed) {}
  FaultPlan decide(const std::string& message);
  bool enabled() const { return cfg_.enabled(); }

 private:
  FaultInjection cfg_;
  std::mutex mtx_;
  std::mt19937_64 rng_;
  std::unordered_map<std::string, int> seen_;  // per rule message name
};

}  // namespace detail
}  // namespace castor
