// castor's exceptions: every failed call completes its Future with an RpcError
// naming the worker and the cause; rpc_sync and Future::wait rethrow it.
#pragma once

#include <stdexcept>
#include <string>

#include "messages/error_info.hpp"

namespace castor {

class RpcError : public std::runtime_error {
 public:
  explicit RpcError(ErrorInfo info)
      : std::runtime_error(info.message), info_(std::move(info)) {}
  ErrorKind kind() const { return info_.kind; }
  /// The worker where it happened (or the one that could not be reached).
  const std::string& worker() const { return info_.worker; }
  const ErrorInfo& info() const { return info_; }

 private:
  ErrorInfo info_;
};

/// The call took longer than its timeout.
struct TimeoutError : RpcError { using RpcError::RpcError; };
/// The peer died, its link is gone, or it was never reachable.
struct UnreachableError : RpcError { using RpcError::RpcError; };
/// The owner of an RRef died: to_here, a method call or passing the RRef on
/// fails with this, naming the owner and the RRef. An UnreachableError, so
/// that code catching those still catches it.
struct OwnerDiedError : UnreachableError { using UnreachableError::UnreachableError; };
/// init_rpc of a restarted worker (incarnation > 1): the world its previous
/// life died from had not finished joining, so there is nothing to rejoin;
/// the whole job must start again (castor's launcher does, on exit code
/// kExitRestartJob). README, "When workers fail".
struct RejoinError : UnreachableError { using UnreachableError::UnreachableError; };
/// The exit code that asks castor's launcher to start the whole job again.
inline constexpr int kExitRestartJob = 75;  // EX_TEMPFAIL
/// The remote function threw; what() holds the remote what() and the worker.
struct RemoteError : RpcError { using RpcError::RpcError; };
/// Unknown worker, function, method, class or RRef.
struct LookupError : RpcError { using RpcError::RpcError; };
/// Wrong number or types of arguments, or a result of another type.
struct TypeError : RpcError { using RpcError::RpcError; };
/// The worker is shut down (or shutting down failed).
struct ShutdownError : RpcError { using RpcError::RpcError; };
/// A distributed backward pass failed.
struct AutogradError : RpcError { using RpcError::RpcError; };

/// Throws the subclass that matches `info.kind`.
[[noreturn]] void throw_rpc_error(ErrorInfo info);

/// Builds an ErrorInfo; `message` should already name the worker and cause.
inline ErrorInfo make_error(ErrorKind kind, std::string worker, std::string message) {
  return ErrorInfo{kind, std::move(worker), std::move(message)};
}

}  // namespace castor
