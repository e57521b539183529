// Plugs the layers above the worker runtime into it (RRefs, and distributed
// autograd as it comes): the one place that knows them all.
#include "actors/runtime.hpp"
#include "engine/autograd_runtime.hpp"
#include "rref/class_registry.hpp"
#include "rref/rref_context.hpp"

namespace castor::detail {

void install_layers(Runtime& rt) {
  rt.rrefs = std::make_unique<RRefRuntime>(rt);
  rt.autograd = std::make_unique<AutogradRuntime>(rt);
  rt.class_known = [](const std::string& name) { return ClassRegistry::instance().find(name) != nullptr; };
}

}  // namespace castor::detail
