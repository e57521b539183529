// The non-template work behind RRef<T> and Worker::remote / make_rref.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "actors/api/registry.hpp"
#include "actors/api/worker_options.hpp"
#include "actors/api/worker_failure.hpp"
#include "messages/value.hpp"
#include "rref/rref_state.hpp"

namespace castor {
class Worker;
}

namespace castor::detail {

/// remote(): starts `fn` (a function, builtin or class name) on `to`; the
/// result stays there as a new OwnerRRef. Returns this worker's handle state.
/// With `restart`, the value is made again on the owner's next life (Note
/// [Restartable values]); std::invalid_argument if the arguments cannot be
/// kept for that (RS5).
RRefStatePtr start_remote(const Worker& w, const std::string& to, const std::string& fn, std::vector<Value> args,
                          std::optional<std::chrono::milliseconds> timeout, std::string type_name,
                          std::optional<Restart> restart = std::nullopt);

/// RRef::remote(): a method whose result stays on the owner as a new RRef.
RRefStatePtr start_remote_method(const RRefStatePtr& target, const std::string& method, std::vector<Value> args,
                                 std::optional<std::chrono::milliseconds> timeout, std::string type_name);

/// make_rref(): a value owned by this worker.
RRefStatePtr make_owned_value(const Worker& w, Value v, std::string type_name);

/// to_here(): the current value (a copy), fetched from the owner. Throws RpcError.
Value fetch_value(const RRefStatePtr& s, std::optional<std::chrono::milliseconds> timeout);

/// A method call on the owner; `done` gets the result.
void call_method(const RRefStatePtr& s, const std::string& method, std::vector<Value> args,
                 std::optional<std::chrono::milliseconds> timeout, Completion done);

/// Waits for an owner's value (local_value); throws if the creation failed or
/// this worker is not the owner.
const Holder& owned_holder(const RRefStatePtr& s);

/// The callback runner of the worker an RRef lives on.
CallbackRunner runner_of(const RRefStatePtr& s);

/// RRef::on_owner_failure (Note [Failure handlers]).
FailureHandlerId on_owner_failure(const RRefStatePtr& s, WorkerFailureHandler handler);

/// The registered name of a class, for RRef type names.
std::string class_name_of(const std::type_info& type);

}  // namespace castor::detail
