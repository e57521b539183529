// The hooks through which the worker runtime (actors/) hands everything that
// involves RRefs to the rref/ layer, which implements them. A lower layer
// defines the interface; the higher one plugs in (see install_layers).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <caf/fwd.hpp>

#include "actors/observe/inspection.hpp"
#include "actors/api/registry.hpp"
#include "messages/call.hpp"
#include "messages/rref_proto.hpp"
#include "messages/value.hpp"

namespace castor::detail {

class Runtime;

class RRefHooks {
 public:
  virtual ~RRefHooks() = default;

  /// Sending side, any thread: every local RRef in `v` becomes a fork for
  /// worker `to` (registered before the message leaves, see Note [RRef
  /// protocol]). The registrations are posted (D9 of Note [Actors run where
  /// their messages arrive]): a reply is encoded under the replier's
  /// teardown gate, and a request leaves sooner when another core registers.
  virtual void fork_for(Value& v, WorkerId to) = 0;

  /// A reply carrying RRefs arrived: its forks become local references, then
  /// `done` gets the value.
  virtual void adopt_then(Value v, Completion done) = 0;

  /// Caller side: a T passed where `fn` takes RRef<T> becomes an RRef owned
  /// by the caller (the RFC's argument conversion).
  virtual void convert_arguments(const CallRequest& req, std::vector<Value>& args) = 0;

  /// Why `args` cannot be sent by this worker (an RRef of another worker of
  /// this process), or nothing.
  virtual std::optional<std::string> foreign_rref(const std::vector<Value>& args) const = 0;

  /// Callee side: whether a request involves RRefs (a target, RRef
  /// arguments, a remote() result), and then its handling.
  virtual bool wants(const CallRequest& req) const = 0;
  virtual void handle_request(CallRequest&& req, caf::strong_actor_ptr reply_to) = 0;

  virtual void handle_control(RRefControl&& msg) = 0;
  virtual void handle_ack(RRefControlAck&& ack) = 0;
  virtual void on_peer_down(WorkerId rank) = 0;
  /// Note [Rejoin]: `rank` is alive again, in its life `incarnation`
  /// (after its on_peer_down).
  virtual void on_peer_rejoined(WorkerId rank, uint32_t incarnation) = 0;

  /// Graceful shutdown: every RRef alive here now is released (called when
  /// shutdown begins, and again whenever nothing else runs, for RRefs made
  /// while this worker kept serving others).
  virtual void on_shutdown_begin() = 0;
  /// No control message awaits an ack and no owner is alive here.
  virtual bool idle() const = 0;
  virtual std::map<std::string, int64_t> debug_info() const = 0;
  /// Owned RRefs and unconfirmed forks here now (castor inspect).
  virtual RRefInspection inspect() const = 0;
  /// Stops the RRef actors (teardown).
  virtual void stop() = 0;
};

}  // namespace castor::detail
