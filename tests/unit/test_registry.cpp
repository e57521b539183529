// The function registry: deduced signatures, argument checks, async results.
#include <doctest/doctest.h>

#include <ATen/ATen.h>

#include "actors/api/registry.hpp"
#include "rref/class_registry.hpp"

using namespace castor;
using namespace castor::detail;

namespace {
Outcome invoke(const FunctionEntry& e, std::vector<Value> args) {
  Outcome out;
  e.invoke(std::move(args), [&](Outcome o) { out = std::move(o); });
  return out;
}
}  // namespace

TEST_CASE("signatures are deduced from the callable") {
  auto e = make_function_entry("f", [](at::Tensor, const std::string&, int, std::vector<double>) { return true; });
  CHECK(e.signature() == "f(Tensor, string, integer, list<double>) -> bool");
  auto v = make_function_entry("g", [] {});
  CHECK(v.signature() == "g() -> None");
  auto fut = make_function_entry("h", []() -> Future<int64_t> { return make_ready_future(int64_t(1)); });
  CHECK(fut.signature() == "h() -> Future<int64>");
}

TEST_CASE("arguments are converted, widened and checked with their position") {
  auto e = make_function_entry("scale", [](at::Tensor t, double s) { return t * s; });
  auto ok = invoke(e, {Value(at::ones({2})), Value(int64_t(3))});  // int widens to double
  REQUIRE(ok.ok);
  CHECK(at::equal(ok.value.to_tensor(), at::full({2}, 3.0)));
  try {
    invoke(e, {Value(at::ones({2})), Value("x")});
    FAIL("expected a CallFailure");
  } catch (const CallFailure& f) {
    CHECK(f.kind == ErrorKind::Type);
    CHECK(f.message == "function 'scale' argument 2: expected double, got string");
  }
  try {
    invoke(e, {Value(at::ones({2}))});
    FAIL("expected a CallFailure");
  } catch (const CallFailure& f) {
    CHECK(f.message == "function 'scale' takes 2 arguments (Tensor, double), got 1");
  }
  auto lists = make_function_entry("sum", [](std::vector<int64_t> xs) {
    int64_t s = 0;
    for (auto x : xs) s += x;
    return s;
  });
  try {
    invoke(lists, {Value(Value::List{Value(1), Value(2.5)})});
    FAIL("expected a CallFailure");
  } catch (const CallFailure& f) {
    CHECK(f.message == "function 'sum' argument 1[1]: expected int64, got double");
  }
}

TEST_CASE("a function returning a Future completes when its Future does") {
  Promise<int64_t> later;
  auto e = make_function_entry("later", [later]() { return later.future(); });
  Outcome out;
  bool called = false;
  e.invoke({}, [&](Outcome o) {
    out = std::move(o);
    called = true;
  });
  CHECK_FALSE(called);
  later.set_value(11);
  CHECK(called);
  CHECK(out.value.to_int() == 11);
}

TEST_CASE("the registry finds functions and reports duplicates") {
  auto& reg = FunctionRegistry::instance();
  reg.add(make_function_entry("unit_dup", [](int64_t x) { return x; }));
  reg.add(make_function_entry("unit_dup", [](double x) { return x; }));
  REQUIRE(reg.find("unit_dup") != nullptr);
  CHECK(reg.find("unit_dup")->signature() == "unit_dup(int64) -> int64");
  CHECK_FALSE(reg.problems().empty());
  CHECK(reg.problems().back().find("'unit_dup' is registered twice") != std::string::npos);
  CHECK(reg.find("nope") == nullptr);
}

namespace {
struct UnitMarked {
  int64_t get() const { return 1; }
  int64_t put(int64_t v) { return v; }
};
}  // namespace

TEST_CASE("runs_on_arrival marks a registered method, and naming none is a registration problem (Note [Methods run on arrival])") {
  ClassBuilder<UnitMarked>::create("UnitMarked")
      .constructor<>()
      .method("get", &UnitMarked::get)
      .method("put", &UnitMarked::put)
      .runs_on_arrival("put")
      .runs_on_arrival("nope");
  const auto* cls = ClassRegistry::instance().find("UnitMarked");
  REQUIRE(cls != nullptr);
  CHECK(cls->method("put")->on_arrival);
  CHECK_FALSE(cls->method("get")->on_arrival);
  auto& problems = FunctionRegistry::instance().problems();
  REQUIRE_FALSE(problems.empty());
  CHECK(problems.back() == "class 'UnitMarked': runs_on_arrival(\"nope\") names no method registered before it");
}
