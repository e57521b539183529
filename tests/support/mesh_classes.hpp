// Classes the mesh tests spawn, registered in test_functions.cpp so that
// child workers (castor_test_worker) register the same ones: a world only
// forms among workers whose registrations agree.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

#include "actors/api/current_worker.hpp"

// Multiplies by (base + its worker's rank): each member answers differently.
class Scaler {
 public:
  explicit Scaler(double base) : factor_(base + castor::current_worker().rank()) {}
  at::Tensor apply(at::Tensor x) { return x * factor_; }
  double factor() const { return factor_; }

 private:
  double factor_;
};

// Refuses on worker2: user code that throws on one member.
class Picky {
 public:
  Picky() = default;
  int64_t check(int64_t x) {
    if (castor::current_worker().name() == "worker2")
      throw std::runtime_error("picky: worker2 refuses " + std::to_string(x));
    return x;
  }
};
