// Tensors on the wire: the dtype table, validation of what may be sent, and
// encoding/decoding through CAF's (de)serializer with every length checked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <caf/fwd.hpp>

#include "messages/value.hpp"

namespace castor::wire {

/// castor's own dtype codes (stable across libtorch versions).
enum class DType : int8_t {
  Bool = 0, UInt8, Int8, Int16, Int32, Int64, Float16, BFloat16, Float32, Float64,
  Complex64, Complex128,
};
inline constexpr int kNumDTypes = 12;
inline constexpr size_t kMaxDims = 64;

std::optional<DType> to_wire_dtype(c10::ScalarType t);
std::optional<c10::ScalarType> from_wire_dtype(int8_t code);

/// Why `t` cannot travel (not CPU, not strided, unsupported dtype), or nothing.
std::optional<std::string> unsendable_reason(const at::Tensor& t);

/// Same for every tensor inside `v`, naming where it sits ("argument 2[1]").
std::optional<std::string> unsendable_reason(const Value& v);

/// Number of bytes a tensor's elements take on the wire (after contiguous()).
size_t wire_bytes(const at::Tensor& t);

/// Encodes a tensor: dtype, flags, sizes, then only the view's elements.
caf::error write_tensor(caf::serializer& f, const at::Tensor& t);

/// Encodes a reference to a tensor whose bytes travel separately.
caf::error write_external(caf::serializer& f, const ExternalTensor& x);

/// Why a contiguous bool tensor's bytes are not all 0 or 1 (any other byte
/// is undefined behaviour in libtorch), or nothing; other dtypes pass.
std::optional<std::string> invalid_bool_bytes(const at::Tensor& t);

/// Decodes into `out`, which is a Tensor or, when the bytes travel separately,
/// an ExternalTensor. Truncated, oversized or inconsistent input is an error.
caf::error read_tensor(caf::deserializer& f, Value& out);

}  // namespace castor::wire
