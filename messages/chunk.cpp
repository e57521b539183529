// TensorChunk wire format: header fields, then the bytes (length-checked).
#include "messages/chunk.hpp"

#include <caf/deserializer.hpp>
#include <caf/sec.hpp>
#include <caf/serializer.hpp>

#include "messages/tensor_wire.hpp"
#include "messages/wire_checks.hpp"

namespace castor {

caf::error inspect(caf::serializer& f, TensorChunk& x) {
  if (auto err = f(x.transfer, x.dtype, wire::checked(x.sizes), x.offset)) return err;
  size_t n = x.slice.defined() ? size_t(x.slice.numel()) : x.bytes.size();
  const void* src = x.slice.defined() ? x.slice.data_ptr() : x.bytes.data();
  if (auto err = f.begin_sequence(n)) return err;
  if (n > 0)
    if (auto err = f.apply_raw(n, const_cast<void*>(src))) return err;
  return f.end_sequence();
}

caf::error inspect(caf::deserializer& f, TensorChunk& x) {
  return wire::decode_or_mark(f, x.malformed, [&]() -> caf::error {
    if (auto err = f(x.transfer, x.dtype, wire::checked(x.sizes), x.offset)) return err;
    if (!wire::from_wire_dtype(x.dtype)) return wire::refuse("unknown tensor dtype code " + std::to_string(x.dtype));
    if (x.sizes.size() > wire::kMaxDims) return wire::refuse("a tensor of " + std::to_string(x.sizes.size()) + " dimensions");
    size_t n = 0;
    if (auto err = wire::read_length(f, n)) return err;
    x.bytes.resize(n);
    if (n > 0)
      if (auto err = f.apply_raw(n, x.bytes.data())) return err;
    return f.end_sequence();
  });
}

}  // namespace castor
