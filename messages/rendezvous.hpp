// Rendezvous messages: joining the world through the name store on rank 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/actor_control_block.hpp>
#include <caf/meta/type_name.hpp>

#include "messages/ids.hpp"
#include "messages/wire_checks.hpp"

namespace castor {

/// Bumped whenever a message's wire format changes; joiners must agree.
inline constexpr uint32_t kWireProtocolVersion = 12;  // 3: Value doubles as raw IEEE 754 bits; 4: bulk_port, pid; 5: incarnation, alive; 6: the bulk greeting says its life; 7: a fork says its owner's life and restart recipe; 8: protocol messages on the bulk link (B10); 9: a context can be joined (ContextControl::join); 10: a same-host head names its revocation word (B15); 11: and each tensor's shared segment (SH3); 12: frames of views without an answer (SH7)

struct WorkerRecord {
  std::string name;
  WorkerId rank = -1;
  std::string host;
  uint16_t port = 0;
  uint16_t bulk_port = 0;  // Note [Bulk path] in actors/transport/bulk/bulk_path.cpp; 0: none
  int32_t pid = 0;         // B7: the only process a same-host peer may copy from
  uint32_t incarnation = 1;  // Note [Rejoin] in actors/cluster/rejoin.cpp
  bool alive = true;         // in the world of the worker that sent the record

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, WorkerRecord& x) {
    return f(caf::meta::type_name("castor::WorkerRecord"), wire::checked(x.name), x.rank,
             wire::checked(x.host), x.port, x.bulk_port, x.pid, x.incarnation, x.alive);
  }
};

struct JoinRequest {
  WorkerRecord self;
  int32_t world_size = 0;
  uint32_t wire_version = kWireProtocolVersion;
  std::string autograd_mode;            // must be the same on every worker
  std::vector<std::string> signatures;  // every registered function and class, sorted
  int64_t timeout_ms = 0;               // the joiner gives up after this long
  // A rejoin (incarnation > 1) only: the joiner's worker actor, taken as
  // its handle at once (RJ4 of Note [Rejoin] in actors/cluster/rejoin.cpp).
  caf::strong_actor_ptr actor;

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, JoinRequest& x) {
    return f(caf::meta::type_name("castor::JoinRequest"), x.self, x.world_size, x.wire_version,
             wire::checked(x.autograd_mode), wire::checked(x.signatures), x.timeout_ms, x.actor);
  }
};

/// The name store's answer: the whole world, or why this worker may not join.
struct JoinReply {
  bool ok = false;
  bool timed_out = false;  // the world did not complete in the joiner's time
  std::string error;
  std::vector<WorkerRecord> workers;  // indexed by rank when ok
  bool ending = false;   // a rejoin refused because the job is ending (RJ7 of Note [Rejoin])
  bool joining = false;  // a rejoin refused because the world is still joining (RJ8)

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, JoinReply& x) {
    return f(caf::meta::type_name("castor::JoinReply"), x.ok, x.timed_out, wire::checked(x.error),
             wire::checked(x.workers), x.ending, x.joining);
  }
};

}  // namespace castor
