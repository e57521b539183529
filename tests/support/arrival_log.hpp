// A class the bulk tests spawn, registered in test_functions.cpp so that
// child workers (castor_test_worker) register it too: a world only forms
// among workers whose registrations agree.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

// Records the order its calls arrive in: one object's methods run one at a
// time in arrival order (Note [Remote objects]).
struct ArrivalLog {
  int64_t record(int64_t i, at::Tensor payload) {
    seen.push_back(payload.numel() > 0 ? i : -1);
    return int64_t(seen.size());
  }
  std::vector<int64_t> arrivals() const { return seen; }
  std::vector<int64_t> seen;
};
