// Plugs the layers above the worker runtime into it (RRefs, distributed
// autograd, the optimizer's functions): the one place that knows them all.
#include "actors/hooks/layers.hpp"
#include "engine/autograd_runtime.hpp"
#include "optimizer/local_optimizer.hpp"
#include "rref/class_registry.hpp"
#include "rref/rref_runtime.hpp"

namespace castor::detail {

Layers install_layers(WorkerServices& services) {
  register_optimizer_functions();  // before the join: they are part of the signatures
  Layers layers;
  layers.rrefs = std::make_unique<RRefRuntime>(services);
  layers.autograd = std::make_unique<AutogradRuntime>(services);
  layers.optimizer = make_local_optimizers(services);
  layers.class_known = [](const std::string& name) { return ClassRegistry::instance().find(name) != nullptr; };
  return layers;
}

}  // namespace castor::detail
