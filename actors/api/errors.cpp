// Maps an ErrorInfo to the matching exception type.
#include "actors/api/errors.hpp"

namespace castor {

void throw_rpc_error(ErrorInfo info) {
  switch (info.kind) {
    case ErrorKind::Timeout: throw TimeoutError(std::move(info));
    case ErrorKind::Unreachable: throw UnreachableError(std::move(info));
    case ErrorKind::Remote: throw RemoteError(std::move(info));
    case ErrorKind::Lookup: throw LookupError(std::move(info));
    case ErrorKind::Type: throw TypeError(std::move(info));
    case ErrorKind::Shutdown: throw ShutdownError(std::move(info));
    case ErrorKind::Autograd: throw AutogradError(std::move(info));
    case ErrorKind::OwnerDied: throw OwnerDiedError(std::move(info));
    case ErrorKind::Internal: break;
  }
  throw RpcError(std::move(info));
}

}  // namespace castor
