// Optimizer specs: aggregates with the learning rate first and libtorch's
// defaults after it (castor::optim::SGD{0.05}, castor::optim::Adam{0.01}).
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "messages/value.hpp"

namespace castor::optim {

struct SGD {
  double lr;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

struct Adam {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool amsgrad = false;
};

struct AdamW {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
};

struct Adagrad {
  double lr = 1e-2;
  double lr_decay = 0;
  double weight_decay = 0;
  double initial_accumulator_value = 0;
  double eps = 1e-10;
};

struct RMSprop {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum = 0;
  bool centered = false;
};

using Spec = std::variant<SGD, Adam, AdamW, Adagrad, RMSprop>;

/// Why `spec` is invalid (negative rates, Nesterov without momentum, ...), or nothing.
std::optional<std::string> invalid_reason(const Spec& spec);

/// The spec's wire form ([name, fields...]) and back (throws std::invalid_argument).
Value to_value(const Spec& spec);
Spec spec_from_value(const Value& v);
std::string name_of(const Spec& spec);

}  // namespace castor::optim
