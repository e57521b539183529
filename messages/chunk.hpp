// TensorChunk: a piece of a tensor too large for one BASP frame (32-bit
// payload length). The chunks of a transfer are sent before the message that
// refers to it (as an ExternalTensor), on the same actor-to-actor path, so
// they arrive first (CAF keeps per-sender FIFO order).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <caf/fwd.hpp>

#include "messages/ids.hpp"

namespace castor {

struct TensorChunk {
  TransferId transfer;
  int8_t dtype = 0;  // wire dtype code of the whole tensor
  std::vector<int64_t> sizes;
  uint64_t offset = 0;  // byte offset of this chunk in the whole tensor
  // Sender side: a byte view into the tensor (no copy). Receiver side: the bytes.
  at::Tensor slice;
  std::vector<char> bytes;
  std::string malformed{};  // receiver side: why decoding failed, see Note [Hostile input] (never sent)
};

caf::error inspect(caf::serializer& f, TensorChunk& x);
caf::error inspect(caf::deserializer& f, TensorChunk& x);
template <class Inspector>
typename std::enable_if<!std::is_base_of<caf::serializer, Inspector>::value &&
                            !std::is_base_of<caf::deserializer, Inspector>::value,
                        typename Inspector::result_type>::type
inspect(Inspector& f, TensorChunk& x) {
  return f(x.transfer, x.offset);
}

}  // namespace castor
