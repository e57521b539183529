// ErrorInfo: an error as it travels between workers (kind, worker, message).
#pragma once

#include <cstdint>
#include <string>

#include <caf/meta/type_name.hpp>

#include "messages/wire_checks.hpp"

namespace castor {

/// What went wrong; decides which RpcError subclass the caller sees.
enum class ErrorKind : uint8_t {
  Remote = 0,    // the user's function threw
  Lookup,        // unknown worker, function, method or RRef
  Type,          // wrong number or types of arguments / result
  Timeout,       // the call took longer than its limit
  Unreachable,   // the peer died or its link is gone
  Shutdown,      // the worker is shut down
  Internal,      // castor broke an invariant: a bug
  Autograd,      // a distributed backward pass failed
  OwnerDied,     // the owner of an RRef died (an Unreachable that names the RRef)
};

struct ErrorInfo {
  ErrorKind kind = ErrorKind::Internal;
  std::string worker;   // where it happened
  std::string message;  // complete, human-readable text

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, ErrorInfo& x) {
    auto k = uint8_t(x.kind);
    if constexpr (std::is_base_of<caf::deserializer, Inspector>::value) {
      if (auto err = f(k, wire::checked(x.worker), wire::checked(x.message))) return err;
      if (k > uint8_t(ErrorKind::OwnerDied)) return wire::refuse("unknown error kind " + std::to_string(k));
      x.kind = ErrorKind(k);
      return caf::none;
    } else {
      return f(caf::meta::type_name("castor::ErrorInfo"), k, wire::checked(x.worker),
               wire::checked(x.message));
    }
  }
};

}  // namespace castor
