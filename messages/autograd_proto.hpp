// Distributed autograd messages: the autograd metadata of a call, the
// gradients of a backward pass, and context cleanup. See Note [FAST mode]
// and Note [Context cleanup] in engine/.
#pragma once

#include <cstdint>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "messages/error_info.hpp"
#include "messages/ids.hpp"
#include "messages/value.hpp"
#include "messages/wire_checks.hpp"

namespace castor {

/// Carried by every call made inside an autograd context. `message` is set
/// when the sender attached a SendRpcBackward: the receiver attaches the
/// paired RecvRpcBackward to the received tensors that require grad.
struct AutogradMeta {
  ContextId context;
  AutogradMessageId message;
  std::vector<uint64_t> lineage;  // SMART mode: recv ids this send depends on

  bool in_context() const { return context.valid(); }

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, AutogradMeta& x) {
    return f(caf::meta::type_name("castor::AutogradMeta"), x.context, x.message, wire::checked(x.lineage));
  }
};

/// The gradients for a send function, from the worker that ran the paired
/// recv function. Answered (BackwardDone) when the receiver's part of the pass
/// is done, see Note [FAST mode].
struct BackwardGrad {
  ContextId context;
  AutogradMessageId send;       // the send function on the receiver
  WorkerId from = -1;           // the sender, which gets the answer
  uint64_t request = 0;         // answered with this id (0: wants no answer, see `completes`)
  uint64_t completes = 0;       // the receiver's own request this gradient also answers (C1 of Note [FAST mode])
  uint64_t pass = 0;            // the backward pass it belongs to (C4)
  std::vector<Value> grads;     // one per input of the send function (None: no gradient)
  bool retain_graph = false;
  int64_t timeout_ms = 0;       // how long a participant may wait for a gradient (FAST mode diagnosis)
  std::vector<uint64_t> participants;  // SMART mode: the sends that take part in this pass
  std::string malformed{};  // receiver side: why decoding failed, see Note [Hostile input] (never sent)

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, BackwardGrad& x) {
    if constexpr (std::is_base_of<caf::deserializer, Inspector>::value)
      return wire::decode_or_mark(f, x.malformed, [&] {
        return f(x.context, x.send, x.from, x.request, x.completes, x.pass, wire::checked(x.grads), x.retain_graph,
                 x.timeout_ms, wire::checked(x.participants));
      });
    else
      return f(caf::meta::type_name("castor::BackwardGrad"), x.context, x.send, x.from, x.request, x.completes, x.pass,
               wire::checked(x.grads), x.retain_graph, x.timeout_ms, wire::checked(x.participants));
  }
};

struct BackwardDone {
  ContextId context;
  uint64_t request = 0;
  bool ok = true;
  ErrorInfo error;
  std::string malformed{};  // receiver side: why decoding failed, see Note [Hostile input] (never sent)

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, BackwardDone& x) {
    if constexpr (std::is_base_of<caf::deserializer, Inspector>::value)
      return wire::decode_or_mark(f, x.malformed, [&] { return f(x.context, x.request, x.ok, x.error); });
    else
      return f(caf::meta::type_name("castor::BackwardDone"), x.context, x.request, x.ok, x.error);
  }
};

/// Context lifecycle messages that travel along the workers a context talked
/// to: cleanup (release the context) or abort (stop its backward pass); and
/// join, from a worker that took part through a peer that died, to the
/// context's creator (Note [Context cleanup]).
struct ContextControl {
  enum Op : uint8_t { cleanup = 0, abort = 1, join = 2 };
  ContextId context;
  uint8_t op = cleanup;
  WorkerId from = -1;
  ErrorInfo reason;  // abort: why
  std::string malformed{};  // receiver side: why decoding failed, see Note [Hostile input] (never sent)

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, ContextControl& x) {
    if constexpr (std::is_base_of<caf::deserializer, Inspector>::value)
      return wire::decode_or_mark(f, x.malformed, [&]() -> caf::error {
        if (auto err = f(x.context, x.op, x.from, x.reason)) return err;
        if (x.op > join) return wire::refuse("unknown context operation " + std::to_string(x.op));
        return caf::none;
      });
    else
      return f(caf::meta::type_name("castor::ContextControl"), x.context, x.op, x.from, x.reason);
  }
};

}  // namespace castor
