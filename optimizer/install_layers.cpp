// Plugs the layers above the worker runtime into it (RRefs, distributed
// autograd, the optimizer's functions): the one place that knows them all.
#include "actors/runtime/runtime.hpp"
#include "engine/autograd_runtime.hpp"
#include "optimizer/local_optimizer.hpp"
#include "rref/class_registry.hpp"
#include "rref/rref_context.hpp"

namespace castor::detail {

void install_layers(Runtime& rt) {
  register_optimizer_functions();  // before the join: they are part of the signatures
  rt.rrefs = std::make_unique<RRefRuntime>(rt);
  rt.autograd = std::make_unique<AutogradRuntime>(rt);
  rt.class_known = [](const std::string& name) { return ClassRegistry::instance().find(name) != nullptr; };
}

}  // namespace castor::detail
