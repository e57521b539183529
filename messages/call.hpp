// Call messages: a request to run a function (or a method, or a builtin) on a
// worker, and its reply.
#pragma once

#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "messages/autograd_proto.hpp"
#include "messages/error_info.hpp"
#include "messages/ids.hpp"
#include "messages/value.hpp"
#include "messages/wire_checks.hpp"

namespace castor {

/// What a CallRequest asks for.
enum class CallKind : uint8_t {
  function = 0,  // run a registered function, a builtin, or construct a class
  method = 1,    // run a method of the object held by `target`
  fetch = 2,     // to_here: the value held by `target`
};

struct CallRequest {
  CallId id;                // chosen by the caller; the reply carries it back
  WorkerId caller = -1;     // rank of the calling worker
  std::string function;     // registered name, "aten::<op>", a class, or a method name
  std::vector<Value> args;  // positional arguments
  CallKind kind = CallKind::function;
  RRefId target;            // method, fetch: an RRef owned by the callee
  RRefForkData result_to;   // remote(): the result is held by this new OwnerRRef
                            // (its rref id and the creator's fork), and the
                            // reply only acknowledges it
  AutogradMeta autograd;    // the caller's autograd context, if any
  int64_t create_within_ms = 0;  // remote(): the owner fails the value if not made by then (0: no bound)
  std::string malformed{};    // receiver side: why decoding failed, see Note [Hostile input] (never sent)

  bool is_remote() const { return result_to.rref_id.valid(); }

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, CallRequest& x) {
    auto kind = uint8_t(x.kind);
    if constexpr (std::is_base_of<caf::deserializer, Inspector>::value) {
      return wire::decode_or_mark(f, x.malformed, [&]() -> caf::error {
        if (auto err = f(x.id, x.caller, wire::checked(x.function), wire::checked(x.args), kind, x.target,
                         x.result_to, x.autograd, x.create_within_ms))
          return err;
        if (kind > uint8_t(CallKind::fetch)) return wire::refuse("unknown call kind " + std::to_string(kind));
        x.kind = CallKind(kind);
        return caf::none;
      });
    } else {
      return f(caf::meta::type_name("castor::CallRequest"), x.id, x.caller, wire::checked(x.function),
               wire::checked(x.args), kind, x.target, x.result_to, x.autograd, x.create_within_ms);
    }
  }
};

struct CallReply {
  CallId id;
  bool ok = false;
  Value result;     // when ok
  ErrorInfo error;  // when not ok
  AutogradMeta autograd;  // set when the result's tensors got a SendRpcBackward
  std::string malformed{};  // receiver side: why decoding failed, see Note [Hostile input] (never sent)

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, CallReply& x) {
    if constexpr (std::is_base_of<caf::deserializer, Inspector>::value)
      return wire::decode_or_mark(f, x.malformed, [&] { return f(x.id, x.ok, x.result, x.error, x.autograd); });
    else
      return f(caf::meta::type_name("castor::CallReply"), x.id, x.ok, x.result, x.error, x.autograd);
  }
};

}  // namespace castor
