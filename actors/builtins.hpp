// Builtins: any ATen operator is callable by name ("aten::add") without
// registration; the overload is chosen from the arguments.
#pragma once

#include <string>
#include <vector>

#include "messages/value.hpp"

namespace castor::detail {

inline bool is_builtin_name(const std::string& name) { return name.rfind("aten::", 0) == 0; }

/// Runs the operator on the calling thread. Throws CallFailure (unknown
/// operator, no overload fits the arguments); exceptions from the kernel
/// propagate as they are.
Value call_builtin(const std::string& name, std::vector<Value>&& args);

}  // namespace castor::detail
