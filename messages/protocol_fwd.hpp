// The protocol messages a worker sends to a peer's worker actor, declared
// only: for the headers that pass them along without reading them.
#pragma once

namespace castor {
struct BackwardGrad;    // autograd_proto.hpp
struct BackwardDone;    // autograd_proto.hpp
struct ContextControl;  // autograd_proto.hpp
struct RRefControl;     // rref_proto.hpp
struct RRefControlAck;  // rref_proto.hpp
}  // namespace castor
