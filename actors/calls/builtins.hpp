// Builtins: any ATen operator is callable by name ("aten::add") without
// registration; the overload is chosen from the arguments.
#pragma once

#include <string>
#include <vector>

#include "messages/value.hpp"

namespace castor::detail {

// Note [Only registered code runs]
// A call from a peer names what to run; it never carries code. The name must
// be one of: a function registered with CASTOR_FUNCTION, a method of a class
// registered with CASTOR_CLASS (on an object the caller holds an RRef to),
// a castor-internal function (registered the same way, "castor." names), or
// an operator of the `aten::` namespace. Anything else -- another JIT
// namespace (prim::, profiler::, c10d::...), a C++ or library symbol, a path
// -- is refused with a LookupError naming the worker, before anything runs.
// ATen operators that reach outside the tensor world are refused too: see
// refused_builtin().
inline bool is_builtin_name(const std::string& name) { return name.rfind("aten::", 0) == 0; }

/// Why ATen operator `name` may not be called by a peer, or nullptr when it
/// may: the operators that read or write files (aten::from_file, aten::save).
const char* refused_builtin(const std::string& name);

/// Runs the operator on the calling thread. Throws CallFailure (unknown
/// operator, no overload fits the arguments); exceptions from the kernel
/// propagate as they are.
Value call_builtin(const std::string& name, std::vector<Value>&& args);

}  // namespace castor::detail
