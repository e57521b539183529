// Value: every kind round-trips; lengths and nesting are bounded on decode.
#include <doctest/doctest.h>

#include <cstring>
#include <limits>

#include <ATen/ATen.h>

#include "messages/call.hpp"
#include "messages/value_traits.hpp"
#include "wire_helpers.hpp"

using namespace castor;
using castor::test::decode;
using castor::test::encode;
using castor::test::roundtrip;

TEST_CASE("scalars, strings, lists and RRef forks round-trip") {
  CHECK(roundtrip(Value()).is_none());
  CHECK(roundtrip(Value(true)).to_bool() == true);
  CHECK(roundtrip(Value(int64_t(-42))).to_int() == -42);
  CHECK(roundtrip(Value(2.5)).to_double() == 2.5);
  CHECK(roundtrip(Value("héllo")).to_string_ref() == "héllo");
  CHECK(roundtrip(Value(std::string(100000, 'x'))).to_string_ref().size() == 100000);
  auto list = roundtrip(Value(Value::List{Value(1), Value("a"), Value(Value::List{Value(false)})}));
  REQUIRE(list.is_list());
  CHECK(list.to_list().size() == 3);
  CHECK(list.to_list()[2].to_list()[0].to_bool() == false);
  RRefForkData fork{3, RRefId(3, 17), ForkId(1, 5), 1, "Tensor"};
  CHECK((roundtrip(Value(fork)).to_rref() == fork));
}

TEST_CASE("a fork carries its owner's life and its restart recipe (Note [Restartable values])") {
  auto recipe = std::make_shared<RestartRecipe>(RestartRecipe{"Counter", {Value(int64_t(7)), Value(at::arange(3))}, 2});
  RRefForkData fork{2, RRefId(0, 9), ForkId(0, 4), 0, "Counter", 3, 1, recipe};
  auto back = roundtrip(Value(fork)).to_rref();
  CHECK((back == fork));
  CHECK(back.owner_incarnation == 3);
  CHECK(back.restarts == 1);
  REQUIRE(back.recipe);
  CHECK(back.recipe->function == "Counter");
  CHECK(back.recipe->max_restarts == 2);
  REQUIRE(back.recipe->args.size() == 2);
  CHECK(back.recipe->args[0].to_int() == 7);
  CHECK(at::equal(back.recipe->args[1].to_tensor(), at::arange(3)));
}

TEST_CASE("a forged recipe with an RRef among its arguments is refused") {
  RRefForkData inner{1, RRefId(1, 2), ForkId(1, 3), 1, "Tensor"};
  auto recipe = std::make_shared<RestartRecipe>(RestartRecipe{"rref_sum", {Value(inner)}, 1});
  RRefForkData fork{2, RRefId(0, 9), ForkId(0, 4), 0, "Tensor", 1, 0, recipe};
  CallRequest req;
  req.function = "rref_sum";
  req.args = {Value(fork)};
  CallRequest back;
  REQUIRE_FALSE(decode(encode(req), back));  // marked malformed, not failed (Note [Hostile input])
  CHECK_MESSAGE(back.malformed.find("a restart recipe with an RRef among its arguments") != std::string::npos,
                back.malformed);
}

TEST_CASE("a forged string length is refused before allocating") {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  uint8_t tag = uint8_t(Value::Kind::String);
  size_t claimed = size_t(1) << 31;  // CAF encodes lengths as 32-bit varbytes
  REQUIRE_FALSE(sink(tag));
  REQUIRE_FALSE(sink.begin_sequence(claimed));
  buf.push_back('a');
  Value out;
  CHECK(decode(buf, out));
}

TEST_CASE("a forged list length is refused") {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  uint8_t tag = uint8_t(Value::Kind::List);
  size_t claimed = size_t(1) << 31;
  REQUIRE_FALSE(sink(tag));
  REQUIRE_FALSE(sink.begin_sequence(claimed));
  Value out;
  CHECK(decode(buf, out));
}

TEST_CASE("nesting deeper than the cap is refused, not a stack overflow") {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  uint8_t tag = uint8_t(Value::Kind::List);
  size_t one = 1;
  for (int i = 0; i < 100000; ++i) {
    REQUIRE_FALSE(sink(tag));
    REQUIRE_FALSE(sink.begin_sequence(one));
  }
  Value out;
  CHECK(decode(buf, out));
  Value ok;
  for (int i = 0; i < 10; ++i) ok = Value(Value::List{ok});
  CHECK(roundtrip(ok).is_list());
}

TEST_CASE("unknown tags and bad bools are refused") {
  std::vector<char> buf{char(99)};
  Value out;
  CHECK(decode(buf, out));
  std::vector<char> b2{char(uint8_t(Value::Kind::Bool)), char(5)};
  CHECK(decode(b2, out));
}

TEST_CASE("call messages round-trip and reject truncation") {
  CallRequest req;
  req.id = CallId(2, 99);
  req.caller = 2;
  req.function = "my_add";
  req.args = {Value(at::ones({2})), Value(int64_t(3))};
  auto buf = encode(req);
  CallRequest back;
  REQUIRE_FALSE(decode(buf, back));
  CHECK((back.id == req.id));
  CHECK(back.function == "my_add");
  CHECK(back.args.size() == 2);
  // A truncated request still decodes, marked malformed with why, so that the
  // worker can name the sender (Note [Hostile input] H2).
  for (size_t n = 0; n < buf.size(); n += 3) {
    std::vector<char> cut(buf.begin(), buf.begin() + long(n));
    CallRequest partial;
    REQUIRE_FALSE(decode(cut, partial));
    CHECK_FALSE(partial.malformed.empty());
  }
  CHECK(back.malformed.empty());
  CallReply reply;
  reply.id = req.id;
  reply.ok = false;
  reply.error = ErrorInfo{ErrorKind::Timeout, "worker1", "too slow"};
  CallReply rback;
  REQUIRE_FALSE(decode(encode(reply), rback));
  CHECK((rback.error.kind == ErrorKind::Timeout));
  CHECK(rback.error.message == "too slow");
}

TEST_CASE("ValueTraits convert C++ types and report mismatches with a path") {
  auto v = ValueTraits<std::vector<std::tuple<int64_t, std::string>>>::to_value({{1, "a"}, {2, "b"}});
  auto back = ValueTraits<std::vector<std::tuple<int64_t, std::string>>>::from_value(std::move(v));
  CHECK(std::get<1>(back[1]) == "b");
  Value bad(Value::List{Value(int64_t(1)), Value("x")});
  try {
    ValueTraits<std::vector<int64_t>>::from_value(std::move(bad));
    FAIL("expected a mismatch");
  } catch (const TypeMismatch& m) {
    CHECK(m.path == "[1]");
    CHECK(m.expected == "int64");
    CHECK(m.given == "string");
  }
  CHECK(ValueTraits<double>::from_value(Value(int64_t(3))) == 3.0);
  CHECK_THROWS_AS(ValueTraits<int8_t>::from_value(Value(int64_t(1000))), TypeMismatch);
  CHECK((ValueTraits<std::optional<at::Tensor>>::from_value(Value()) == std::nullopt));
}

// Found by tests/fuzz: CAF 0.17 encodes a double with a loop that never ends
// on an infinity (and loses NaN payloads and subnormals), so re-sending a
// received infinity hung the sending thread. Values carry the IEEE bits.
TEST_CASE("infinities, NaNs and subnormals round-trip bit for bit") {
  for (double d : {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::denorm_min(), -0.0,
                   std::numeric_limits<double>::max(), 1.0 / 3}) {
    auto back = roundtrip(Value(d));
    REQUIRE(back.is_double());
    double got = back.to_double();
    CHECK(std::memcmp(&got, &d, sizeof d) == 0);
  }
}

TEST_CASE("malformed content marks the message with why instead of failing it") {
  CallRequest req;
  req.id = CallId(1, 7);
  req.caller = 1;
  req.function = "f";
  req.args = {Value(int64_t(1))};
  auto buf = encode(req);
  // The argument's value tag sits after id (8), caller (2), name (1 + 1) and
  // the argument count (1): make it an unknown tag.
  buf[8 + 2 + 2 + 1] = char(77);
  CallRequest back;
  REQUIRE_FALSE(decode(buf, back));
  CHECK((back.id == req.id));  // what was read before stays: the reply can name the call
  CHECK(back.malformed == "unknown value tag 77");

  CallReply reply{CallId(1, 7), true, Value(at::ones({2})), {}, {}};
  auto rbuf = encode(reply);
  rbuf[8 + 1 + 1] = char(99);  // the tensor's dtype code
  CallReply rback;
  REQUIRE_FALSE(decode(rbuf, rback));
  CHECK(rback.malformed == "unknown tensor dtype code 99");

  ContextControl ctl{ContextId(1, 1), 1, 0, {}};
  auto cbuf = encode(ctl);
  cbuf[8] = char(5);  // the operation
  ContextControl cback;
  REQUIRE_FALSE(decode(cbuf, cback));
  CHECK(cback.malformed == "unknown context operation 5");

  // Nested structs and plain values stay strict: only whole messages are marked.
  Value v;
  std::vector<char> vbuf{char(77)};
  CHECK(decode(vbuf, v));
}
