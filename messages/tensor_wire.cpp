// Tensor encoding: one copy of the elements into the outgoing buffer, one copy
// out of the incoming buffer straight into the new tensor's storage.
#include "messages/tensor_wire.hpp"

#include <ATen/ATen.h>

#include <caf/deserializer.hpp>
#include <caf/sec.hpp>
#include <caf/serializer.hpp>

#include "messages/wire_checks.hpp"

namespace castor::wire {
namespace {

constexpr c10::ScalarType kTable[kNumDTypes] = {
    c10::ScalarType::Bool,     c10::ScalarType::Byte,         c10::ScalarType::Char,
    c10::ScalarType::Short,    c10::ScalarType::Int,          c10::ScalarType::Long,
    c10::ScalarType::Half,     c10::ScalarType::BFloat16,     c10::ScalarType::Float,
    c10::ScalarType::Double,   c10::ScalarType::ComplexFloat, c10::ScalarType::ComplexDouble,
};

enum TensorFlags : uint8_t {
  kRequiresGrad = 1,
  kExternal = 2,  // the elements travel separately, see ExternalTensor
};

}  // namespace

std::optional<DType> to_wire_dtype(c10::ScalarType t) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (kTable[i] == t) return DType(i);
  return std::nullopt;
}

std::optional<c10::ScalarType> from_wire_dtype(int8_t code) {
  if (code < 0 || code >= kNumDTypes) return std::nullopt;
  return kTable[code];
}

std::optional<std::string> unsendable_reason(const at::Tensor& t) {
  if (!t.defined()) return std::string("an undefined tensor cannot be sent");
  if (!t.device().is_cpu())
    return "a tensor on " + t.device().str() + " cannot be sent (castor moves CPU tensors)";
  if (t.layout() != c10::kStrided)
    return std::string("a sparse or non-strided tensor cannot be sent");
  if (t.is_quantized()) return std::string("a quantized tensor cannot be sent");
  if (!to_wire_dtype(t.scalar_type()))
    return std::string("tensors of dtype ") + c10::toString(t.scalar_type()) + " cannot be sent";
  if (t.dim() > int64_t(kMaxDims)) return std::string("a tensor with more than 64 dimensions cannot be sent");
  return std::nullopt;
}

namespace {
std::optional<std::string> unsendable_in(const Value& v, const std::string& where) {
  if (v.is_tensor()) {
    if (auto why = unsendable_reason(v.to_tensor())) return where + ": " + *why;
  } else if (v.is_list()) {
    const auto& xs = v.to_list();
    for (size_t i = 0; i < xs.size(); ++i)
      if (auto why = unsendable_in(xs[i], where + "[" + std::to_string(i) + "]")) return why;
  }
  return std::nullopt;
}
}  // namespace

std::optional<std::string> unsendable_reason(const Value& v) { return unsendable_in(v, "value"); }

size_t wire_bytes(const at::Tensor& t) { return size_t(t.numel()) * t.element_size(); }

caf::error write_tensor(caf::serializer& f, const at::Tensor& t) {
  // Only the view's elements travel: contiguous() copies a strided view's
  // elements and is free for a tensor that is already contiguous.
  auto src = t.detach().contiguous();
  auto code = int8_t(*to_wire_dtype(src.scalar_type()));
  uint8_t flags = t.requires_grad() ? kRequiresGrad : 0;
  auto ndim = uint8_t(src.dim());
  if (auto err = f(code, flags, ndim)) return err;
  for (auto s : src.sizes()) {
    int64_t v = s;
    if (auto err = f(v)) return err;
  }
  size_t n = wire_bytes(src);
  if (auto err = f.begin_sequence(n)) return err;
  if (n > 0)
    if (auto err = f.apply_raw(n, src.data_ptr())) return err;
  return f.end_sequence();
}

caf::error write_external(caf::serializer& f, const ExternalTensor& x) {
  int8_t code = x.dtype;
  uint8_t flags = uint8_t(kExternal | (x.requires_grad ? kRequiresGrad : 0));
  auto ndim = uint8_t(x.sizes.size());
  if (auto err = f(code, flags, ndim)) return err;
  for (auto s : x.sizes) {
    int64_t v = s;
    if (auto err = f(v)) return err;
  }
  auto transfer = x.transfer;
  return f(transfer);
}

std::optional<std::string> invalid_bool_bytes(const at::Tensor& t) {
  if (t.scalar_type() != c10::ScalarType::Bool) return std::nullopt;
  auto* p = static_cast<const uint8_t*>(t.data_ptr());
  for (size_t i = 0, n = size_t(t.numel()); i < n; ++i)
    if (p[i] > 1) return "a bool tensor element of " + std::to_string(p[i]);
  return std::nullopt;
}

caf::error read_tensor(caf::deserializer& f, Value& out) {
  int8_t code = 0;
  uint8_t flags = 0;
  uint8_t ndim = 0;
  if (auto err = f(code, flags, ndim)) return err;
  auto dtype = from_wire_dtype(code);
  if (!dtype) return refuse("unknown tensor dtype code " + std::to_string(code));
  if (ndim > kMaxDims) return refuse("a tensor of " + std::to_string(ndim) + " dimensions");
  if ((flags & ~uint8_t(kRequiresGrad | kExternal)) != 0) return refuse("unknown tensor flags " + std::to_string(flags));
  std::vector<int64_t> sizes(ndim);
  // numel with overflow checks: a forged shape must not wrap around.
  uint64_t numel = 1;
  for (auto& s : sizes) {
    if (auto err = f(s)) return err;
    if (s < 0) return refuse("a negative tensor size");
    if (s != 0 && numel > (uint64_t{1} << 62) / uint64_t(s)) return refuse("a tensor shape with too many elements");
    numel *= uint64_t(s);
  }
  auto elem = c10::elementSize(*dtype);
  bool requires_grad = (flags & kRequiresGrad) != 0;
  if (requires_grad && !c10::isFloatingType(*dtype) && !c10::isComplexType(*dtype))
    return refuse("requires_grad on a tensor of dtype " + std::string(c10::toString(*dtype)));
  if (flags & kExternal) {
    ExternalTensor ext;
    if (auto err = f(ext.transfer)) return err;
    ext.dtype = code;
    ext.sizes = std::move(sizes);
    ext.requires_grad = requires_grad;
    out = Value(std::move(ext));
    return caf::none;
  }
  size_t n = 0;
  if (auto err = f.begin_sequence(n)) return err;
  if (numel > std::numeric_limits<uint64_t>::max() / elem || n != numel * elem)
    return refuse("tensor bytes (" + std::to_string(n) + ") do not match its shape");
  if (n > remaining_bytes(f)) return caf::make_error(caf::sec::end_of_stream, "tensor bytes beyond the message's end");
  auto t = at::empty(sizes, at::TensorOptions().dtype(*dtype));
  if (n > 0)
    if (auto err = f.apply_raw(n, t.data_ptr())) return err;
  if (auto bad = invalid_bool_bytes(t)) return refuse(*bad);
  if (auto err = f.end_sequence()) return err;
  if (requires_grad) t.set_requires_grad(true);
  out = Value(std::move(t));
  return caf::none;
}

}  // namespace castor::wire
