// Builtins by name: overload choice, defaults, errors.
#include <doctest/doctest.h>

#include <ATen/ATen.h>

#include "actors/calls/builtins.hpp"
#include "actors/api/registry.hpp"

using namespace castor;
using namespace castor::detail;

TEST_CASE("overloads are chosen from the argument kinds and defaults filled") {
  auto a = at::rand({2, 3});
  auto b = at::rand({2, 3});
  CHECK(at::allclose(call_builtin("aten::add", {Value(a), Value(b)}).to_tensor(), a + b));
  CHECK(at::allclose(call_builtin("aten::add", {Value(a), Value(2.0)}).to_tensor(), a + 2.0));
  CHECK(at::allclose(call_builtin("aten::mul", {Value(a), Value(int64_t(3))}).to_tensor(), a * 3));
  CHECK(at::allclose(call_builtin("aten::sum", {Value(a), Value(Value::List{Value(int64_t(1))})}).to_tensor(),
                     a.sum(1)));
  auto t = call_builtin("aten::transpose", {Value(a), Value(int64_t(0)), Value(int64_t(1))}).to_tensor();
  CHECK(t.sizes() == at::IntArrayRef({3, 2}));
  auto z = call_builtin("aten::zeros", {Value(Value::List{Value(int64_t(2)), Value(int64_t(2))})}).to_tensor();
  CHECK(at::equal(z, at::zeros({2, 2})));
  auto parts = call_builtin("aten::chunk", {Value(a), Value(int64_t(2)), Value(int64_t(1))});
  CHECK(parts.to_list().size() == 2);
  auto maxed = call_builtin("aten::max", {Value(a), Value(int64_t(1))});  // (values, indices)
  CHECK(maxed.to_list().size() == 2);
}

TEST_CASE("TorchScript's own overloads are reachable too") {
  CHECK(call_builtin("aten::add", {Value("a"), Value("b")}).to_string_ref() == "ab");
}

TEST_CASE("unknown operators and unfit arguments are explained") {
  try {
    call_builtin("aten::frobnicate", {});
    FAIL("expected a CallFailure");
  } catch (const CallFailure& f) {
    CHECK(f.kind == ErrorKind::Lookup);
    CHECK(f.message == "unknown builtin operator 'aten::frobnicate'");
  }
  CHECK_THROWS_AS(call_builtin("aten::", {}), CallFailure);
  try {
    call_builtin("aten::matmul", {Value("a"), Value("b")});
    FAIL("expected a CallFailure");
  } catch (const CallFailure& f) {
    CHECK(f.kind == ErrorKind::Type);
    CHECK(f.message.find("no overload of 'aten::matmul' takes (string, string)") == 0);
    CHECK(f.message.find("aten::matmul(Tensor self, Tensor other)") != std::string::npos);
  }
}
