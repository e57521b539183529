// Tensor serialization: every dtype, shapes, views, and hostile payloads.
#include <doctest/doctest.h>

#include <random>

#include <ATen/ATen.h>

#include "messages/tensor_wire.hpp"
#include "wire_helpers.hpp"

using namespace castor;
using castor::test::decode;
using castor::test::encode;
using castor::test::roundtrip;

namespace {
at::Tensor sample(c10::ScalarType t, at::IntArrayRef sizes) {
  auto base = at::randn(sizes, at::kDouble) * 100;
  if (t == at::kBool) return base > 0;
  if (c10::isComplexType(t)) return at::complex(base, base * 2).to(t);
  return base.to(t);
}
}  // namespace

TEST_CASE("every CPU dtype round-trips with its values and dtype") {
  const c10::ScalarType dtypes[] = {at::kBool, at::kByte, at::kChar, at::kShort, at::kInt, at::kLong,
                                    at::kHalf, at::kBFloat16, at::kFloat, at::kDouble, at::kComplexFloat,
                                    at::kComplexDouble};
  for (auto dt : dtypes) {
    CAPTURE(c10::toString(dt));
    auto t = sample(dt, {3, 4});
    auto back = roundtrip(Value(t)).to_tensor();
    CHECK((back.scalar_type() == dt));
    CHECK((back.sizes() == t.sizes()));
    CHECK(at::equal(back, t));
  }
}

TEST_CASE("0-dim, empty and multi-dim shapes keep their shape") {
  auto scalar = at::scalar_tensor(3.5, at::kDouble);
  auto back = roundtrip(Value(scalar)).to_tensor();
  CHECK(back.dim() == 0);
  CHECK(back.item<double>() == 3.5);

  auto empty = at::empty({0, 5}, at::kFloat);
  auto eback = roundtrip(Value(empty)).to_tensor();
  CHECK((eback.sizes() == at::IntArrayRef({0, 5})));

  auto nd = at::arange(2 * 3 * 4 * 5, at::kLong).reshape({2, 3, 4, 5});
  CHECK(at::equal(roundtrip(Value(nd)).to_tensor(), nd));
}

TEST_CASE("a large tensor round-trips") {
  auto big = at::rand({16 * 1024 * 1024}, at::kFloat);  // 64 MiB
  auto back = roundtrip(Value(big)).to_tensor();
  CHECK(at::equal(back, big));
}

TEST_CASE("non-contiguous tensors and views send only the view's elements") {
  auto base = at::arange(1000 * 1000, at::kFloat).reshape({1000, 1000});
  auto transposed = base.t();
  CHECK(at::equal(roundtrip(Value(transposed)).to_tensor(), transposed));

  auto column = base.select(1, 7);  // strided view of 1000 elements
  auto col_bytes = encode(Value(column)).size();
  CHECK(col_bytes < 1000 * 4 + 64);
  CHECK(at::equal(roundtrip(Value(column)).to_tensor(), column));

  auto rows = base.narrow(0, 10, 2);  // contiguous view with a storage offset
  auto row_bytes = encode(Value(rows)).size();
  CHECK(row_bytes < 2000 * 4 + 64);
  CHECK(at::equal(roundtrip(Value(rows)).to_tensor(), rows));
}

TEST_CASE("requires_grad travels -- the received tensor is a fresh leaf") {
  auto w = at::ones({2, 2}).set_requires_grad(true);
  auto y = w * 2;  // non-leaf
  auto back = roundtrip(Value(y)).to_tensor();
  CHECK(back.requires_grad());
  CHECK(back.is_leaf());
  CHECK(at::equal(back.detach(), y.detach()));
}

TEST_CASE("unsendable tensors are explained before sending") {
  CHECK(wire::unsendable_reason(at::Tensor()).value().find("undefined") != std::string::npos);
  auto q = at::quantize_per_tensor(at::rand({2}), 0.1, 0, at::kQUInt8);
  CHECK(wire::unsendable_reason(q).has_value());
  CHECK_FALSE(wire::unsendable_reason(at::rand({2})).has_value());
  Value nested(Value::List{Value(int64_t(1)), Value(Value::List{Value(at::Tensor())})});
  auto why = wire::unsendable_reason(nested);
  REQUIRE(why.has_value());
  CHECK(why->find("value[1][0]") != std::string::npos);
}

TEST_CASE("every truncation of a tensor payload is rejected") {
  auto buf = encode(Value(at::rand({4, 4}, at::kDouble)));
  for (size_t n = 0; n < buf.size(); ++n) {
    std::vector<char> cut(buf.begin(), buf.begin() + long(n));
    Value out;
    CHECK_MESSAGE(decode(cut, out), "prefix of " << n << " bytes decoded");
  }
}

TEST_CASE("a forged element count is refused without allocating it") {
  // tag Tensor, dtype float32, flags 0, ndim 1, 2^29 elements, a consistent
  // byte count of 2 GiB, and no bytes: must fail on the length, not on malloc.
  std::vector<char> forged;
  caf::binary_serializer sink{nullptr, forged};
  uint8_t tag = uint8_t(Value::Kind::Tensor);
  int8_t dtype = int8_t(wire::DType::Float32);
  uint8_t flags = 0, ndim = 1;
  int64_t size = int64_t(1) << 29;
  size_t nbytes = size_t(1) << 31;
  REQUIRE_FALSE(sink(tag, dtype, flags, ndim, size));
  REQUIRE_FALSE(sink.begin_sequence(nbytes));
  Value out;
  CHECK(decode(forged, out));
}

TEST_CASE("inconsistent shape and byte count, bad dtype, bad bool bytes are refused") {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  uint8_t tag = uint8_t(Value::Kind::Tensor);
  int8_t dtype = int8_t(wire::DType::Float32);
  uint8_t flags = 0, ndim = 1;
  int64_t size = 3;
  size_t nbytes = 8;  // should be 12
  REQUIRE_FALSE(sink(tag, dtype, flags, ndim, size));
  REQUIRE_FALSE(sink.begin_sequence(nbytes));
  char zeros[12] = {};
  REQUIRE_FALSE(sink.apply_raw(12, zeros));
  Value out;
  CHECK(decode(buf, out));

  std::vector<char> bad_dtype;
  caf::binary_serializer s2{nullptr, bad_dtype};
  int8_t unknown = 42;
  REQUIRE_FALSE(s2(tag, unknown, flags, ndim, size));
  CHECK(decode(bad_dtype, out));

  auto bools = encode(Value(at::ones({4}, at::kBool)));
  bools.back() = 7;  // a bool byte that is neither 0 nor 1
  CHECK(decode(bools, out));

  auto ints = encode(Value(at::ones({2}, at::kInt)));
  ints[2] = char(0x80);  // unknown flag bit
  CHECK(decode(ints, out));
}

TEST_CASE("random corruption never crashes the decoder") {
  std::mt19937 rng(1234);
  Value sample_value(Value::List{Value(at::rand({3, 3})), Value("text"), Value(int64_t(7)),
                                 Value(Value::List{Value(at::ones({2}, at::kBool)), Value(2.5)})});
  auto buf = encode(sample_value);
  int decoded = 0, rejected = 0;
  for (int i = 0; i < 5000; ++i) {
    auto copy = buf;
    int flips = 1 + int(rng() % 4);
    for (int f = 0; f < flips; ++f) copy[rng() % copy.size()] = char(rng());
    if (rng() % 3 == 0) copy.resize(rng() % copy.size());
    Value out;
    if (decode(copy, out))
      ++rejected;
    else
      ++decoded;
  }
  CHECK(decoded + rejected == 5000);
  CHECK(rejected > 0);
}
