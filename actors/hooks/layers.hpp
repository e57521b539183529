// The layers above actors/, as the worker runtime holds them: made by
// install_layers (optimizer/install_layers.cpp, the one place that knows
// them all), stopped by the runtime's teardown.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "actors/hooks/autograd_hooks.hpp"
#include "actors/hooks/rref_hooks.hpp"
#include "actors/hooks/worker_services.hpp"

namespace castor::detail {

struct Layers {
  std::unique_ptr<RRefHooks> rrefs;          // rref/
  std::unique_ptr<AutogradHooks> autograd;   // engine/
  std::unique_ptr<OptimizerHooks> optimizer; // optimizer/
  std::function<bool(const std::string&)> class_known;  // for error messages
};

/// Makes the layers for the worker behind `services` (before its join: they
/// register functions the join compares).
Layers install_layers(WorkerServices& services);

}  // namespace castor::detail
