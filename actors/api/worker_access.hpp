// castor's own reach into a Worker beyond its user API: the call entry
// points the public templates (Worker::rpc_async, RRef methods) and the
// layers above actors/ use. Not part of the user API.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "actors/api/future.hpp"
#include "actors/api/registry.hpp"
#include "messages/call.hpp"
#include "messages/value.hpp"

namespace castor {
class Worker;
}

namespace castor::detail {

class WorkerServices;

/// Sends `fn` to the worker named `to`; `done` always runs exactly once
/// (errors included).
void call_raw(const Worker& w, const std::string& to, const std::string& fn, std::vector<Value> args,
              std::optional<std::chrono::milliseconds> timeout, Completion done);
/// Sends a prepared request (kind, target, result_to set by the caller).
void call_request(const Worker& w, WorkerId to, CallRequest req, std::optional<std::chrono::milliseconds> timeout,
                  Completion done);
/// The rank of a worker by name; throws LookupError naming the known ones.
WorkerId rank_of(const Worker& w, const std::string& name);
/// Where then-callbacks of `w`'s futures run.
CallbackRunner callback_runner(const Worker& w);
/// What `w` lends castor's layers (actors/hooks/worker_services.hpp).
WorkerServices& services(const Worker& w);

}  // namespace castor::detail
