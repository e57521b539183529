// RRef control messages (see Note [RRef protocol] in rref/rref_context.hpp).
// Each is retried until acknowledged and handled idempotently.
#pragma once

#include <cstdint>
#include <string>

#include <caf/meta/type_name.hpp>
#include <caf/sec.hpp>

#include "messages/ids.hpp"
#include "messages/wire_checks.hpp"

namespace castor {

enum class RRefOp : uint8_t {
  fork_request = 0,  // child -> owner: count my fork; the ack is the owner's confirmation
  child_accept = 1,  // child -> parent: the owner confirmed my fork, release your pending child
  user_delete = 2,   // user -> owner: my fork is gone (G1)
};

const char* to_string(RRefOp op);

struct RRefControl {
  ControlId id;  // unique per sender: acks name it, duplicates are recognized by it
  RRefOp op = RRefOp::fork_request;
  RRefId rref;
  ForkId fork;
  WorkerId holder = -1;  // who holds `fork` (the child, or the deleting user)
  std::string malformed{};  // receiver side: why decoding failed, see Note [Hostile input] (never sent)

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, RRefControl& x) {
    auto op = uint8_t(x.op);
    if constexpr (std::is_base_of<caf::deserializer, Inspector>::value) {
      return wire::decode_or_mark(f, x.malformed, [&]() -> caf::error {
        if (auto err = f(x.id, op, x.rref, x.fork, x.holder)) return err;
        if (op > uint8_t(RRefOp::user_delete)) return wire::refuse("unknown RRef operation " + std::to_string(op));
        x.op = RRefOp(op);
        return caf::none;
      });
    } else {
      return f(caf::meta::type_name("castor::RRefControl"), x.id, op, x.rref, x.fork, x.holder);
    }
  }
};

struct RRefControlAck {
  ControlId id;

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, RRefControlAck& x) {
    return f(caf::meta::type_name("castor::RRefControlAck"), x.id);
  }
};

}  // namespace castor
