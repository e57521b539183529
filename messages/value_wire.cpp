// Value on the wire: a one-byte tag, then the payload. Decoding never trusts a
// length: every count is checked against the bytes left, nesting is capped.
#include <cstring>

#include <caf/deserializer.hpp>
#include <caf/sec.hpp>
#include <caf/serializer.hpp>

#include "messages/tensor_wire.hpp"
#include "messages/value.hpp"
#include "messages/wire_checks.hpp"

namespace castor {
namespace wire {

std::string describe(const caf::error& err) {
  if (!err) return "no error";
  const auto& ctx = err.context();
  if (ctx.size() == 1 && ctx.match_element<std::string>(0)) return ctx.get_as<std::string>(0);
  if (err.category() == caf::atom("system")) {
    auto code = static_cast<caf::sec>(err.code());
    if (code == caf::sec::end_of_stream) return "truncated";
    return caf::to_string(code);
  }
  return caf::to_string(err);
}

caf::error write_string(caf::serializer& f, std::string& s) {
  size_t n = s.size();
  if (auto err = f.begin_sequence(n)) return err;
  if (n > 0)
    if (auto err = f.apply_raw(n, s.data())) return err;
  return f.end_sequence();
}

caf::error read_string(caf::deserializer& f, std::string& s) {
  size_t n = 0;
  if (auto err = read_length(f, n)) return err;
  s.resize(n);
  if (n > 0)
    if (auto err = f.apply_raw(n, s.data())) return err;
  return f.end_sequence();
}

}  // namespace wire

namespace {

// Deeper nesting than this is refused: a forged message must not exhaust the
// stack of the thread that decodes it.
constexpr int kMaxNesting = 64;

caf::error read_value(caf::deserializer& f, Value& x, int depth);
caf::error read_fork(caf::deserializer& f, RRefForkData& x, int depth);

caf::error write_value(caf::serializer& f, Value& x) {
  if (x.is_external()) {
    // A tensor whose bytes travel in chunks: same tag, the external flag set.
    auto tag = uint8_t(Value::Kind::Tensor);
    if (auto err = f(tag)) return err;
    return wire::write_external(f, x.to_external());
  }
  auto tag = uint8_t(x.kind());
  if (auto err = f(tag)) return err;
  switch (x.kind()) {
    case Value::Kind::None: return caf::none;
    case Value::Kind::Bool: {
      uint8_t b = x.to_bool() ? 1 : 0;
      return f(b);
    }
    case Value::Kind::Int: {
      int64_t i = x.to_int();
      return f(i);
    }
    case Value::Kind::Double: {
      // The IEEE 754 bits as they are: CAF 0.17's own double encoding loops
      // forever on an infinity and loses NaNs and subnormals.
      double d = x.to_double();
      uint64_t bits = 0;
      std::memcpy(&bits, &d, sizeof bits);
      return f(bits);
    }
    case Value::Kind::String: return wire::write_string(f, x.to_string_ref());
    case Value::Kind::Tensor: return wire::write_tensor(f, x.to_tensor());
    case Value::Kind::List: {
      auto& xs = x.to_list();
      size_t n = xs.size();
      if (auto err = f.begin_sequence(n)) return err;
      for (auto& item : xs)
        if (auto err = write_value(f, item)) return err;
      return f.end_sequence();
    }
    case Value::Kind::RRef: return inspect(f, x.to_rref());
    case Value::Kind::External: return caf::sec::invalid_argument;  // written with the Tensor tag, below
  }
  return caf::sec::invalid_argument;
}

caf::error read_value(caf::deserializer& f, Value& x, int depth) {
  if (depth > kMaxNesting) return wire::refuse("values nested deeper than " + std::to_string(kMaxNesting));
  uint8_t tag = 0;
  if (auto err = f(tag)) return err;
  switch (Value::Kind(tag)) {
    case Value::Kind::None: x = Value(); return caf::none;
    case Value::Kind::Bool: {
      uint8_t b = 0;
      if (auto err = f(b)) return err;
      if (b > 1) return wire::refuse("a bool byte of " + std::to_string(b));
      x = Value(b == 1);
      return caf::none;
    }
    case Value::Kind::Int: {
      int64_t i = 0;
      if (auto err = f(i)) return err;
      x = Value(i);
      return caf::none;
    }
    case Value::Kind::Double: {
      uint64_t bits = 0;
      if (auto err = f(bits)) return err;
      double d = 0;
      std::memcpy(&d, &bits, sizeof d);
      x = Value(d);
      return caf::none;
    }
    case Value::Kind::String: {
      std::string s;
      if (auto err = wire::read_string(f, s)) return err;
      x = Value(std::move(s));
      return caf::none;
    }
    case Value::Kind::Tensor: return wire::read_tensor(f, x);
    case Value::Kind::List: {
      size_t n = 0;
      if (auto err = wire::read_length(f, n)) return err;  // every item takes >= 1 byte
      Value::List xs(n);
      for (auto& item : xs)
        if (auto err = read_value(f, item, depth + 1)) return err;
      x = Value(std::move(xs));
      return f.end_sequence();
    }
    case Value::Kind::RRef: {
      RRefForkData r;
      if (auto err = read_fork(f, r, depth + 1)) return err;
      x = Value(std::move(r));
      return caf::none;
    }
    default: return wire::refuse("unknown value tag " + std::to_string(tag));
  }
}

// A fork's recipe (castor::Restart) follows its fields behind a flag byte.
caf::error write_fork(caf::serializer& f, RRefForkData& x) {
  uint8_t has_recipe = x.recipe ? 1 : 0;
  if (auto err = f(x.owner, x.rref_id, x.fork_id, x.parent, wire::checked(x.type_name), x.owner_incarnation,
                   x.restarts, has_recipe))
    return err;
  if (!x.recipe) return caf::none;
  auto function = x.recipe->function;
  auto max = x.recipe->max_restarts;
  auto n = x.recipe->args.size();
  if (auto err = f(wire::checked(function), max)) return err;
  if (auto err = f.begin_sequence(n)) return err;
  for (auto arg : x.recipe->args)  // a copy: write_value takes a mutable value
    if (auto err = write_value(f, arg)) return err;
  return f.end_sequence();
}

caf::error read_fork(caf::deserializer& f, RRefForkData& x, int depth) {
  uint8_t has_recipe = 0;
  if (auto err = f(x.owner, x.rref_id, x.fork_id, x.parent, wire::checked(x.type_name), x.owner_incarnation,
                   x.restarts, has_recipe))
    return err;
  if (has_recipe > 1) return wire::refuse("a recipe flag of " + std::to_string(has_recipe));
  if (has_recipe == 0) return caf::none;
  auto recipe = std::make_shared<RestartRecipe>();
  size_t n = 0;
  if (auto err = f(wire::checked(recipe->function), recipe->max_restarts)) return err;
  if (auto err = wire::read_length(f, n)) return err;
  recipe->args.resize(n);
  for (auto& arg : recipe->args) {
    if (auto err = read_value(f, arg, depth + 1)) return err;
    if (arg.contains_rref()) return wire::refuse("a restart recipe with an RRef among its arguments");
  }
  if (auto err = f.end_sequence()) return err;
  x.recipe = std::move(recipe);
  return caf::none;
}

}  // namespace

caf::error inspect(caf::serializer& f, Value& x) { return write_value(f, x); }
caf::error inspect(caf::deserializer& f, Value& x) { return read_value(f, x, 0); }

caf::error inspect(caf::serializer& f, RRefForkData& x) { return write_fork(f, x); }
caf::error inspect(caf::deserializer& f, RRefForkData& x) { return read_fork(f, x, 0); }

}  // namespace castor
