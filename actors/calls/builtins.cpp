// ATen operators by name through the JIT operator registry: pick the overload
// the arguments fit best, fill defaults from its schema, run it on a stack.
#include "actors/calls/builtins.hpp"

#include <mutex>
#include <unordered_map>

#include <ATen/ATen.h>
#include <ATen/core/interned_strings.h>
#include <torch/csrc/jit/runtime/operator.h>

#include "actors/api/registry.hpp"

namespace castor::detail {
namespace {

using c10::IValue;
using c10::TypeKind;
using c10::TypePtr;

constexpr int kNoMatch = -1;

// How well `v` fits a schema type: kNoMatch, 0 (exact) or a conversion cost.
int fit(const Value& v, const TypePtr& t) {
  switch (t->kind()) {
    case TypeKind::OptionalType:
      if (v.is_none()) return 0;
      return fit(v, t->castRaw<c10::OptionalType>()->getElementType());
    case TypeKind::TensorType: return v.is_tensor() ? 0 : kNoMatch;
    case TypeKind::IntType:
    case TypeKind::SymIntType: return v.is_int() ? 0 : kNoMatch;
    case TypeKind::FloatType:
    case TypeKind::SymFloatType: return v.is_double() ? 0 : v.is_int() ? 1 : kNoMatch;
    case TypeKind::NumberType: return (v.is_int() || v.is_double()) ? 0 : v.is_bool() ? 2 : kNoMatch;
    case TypeKind::BoolType: return v.is_bool() ? 0 : kNoMatch;
    case TypeKind::StringType:
    case TypeKind::DeviceObjType: return v.is_string() ? 0 : kNoMatch;
    case TypeKind::AnyType: return 1;
    case TypeKind::ListType: {
      auto elem = t->castRaw<c10::ListType>()->getElementType();
      if (!v.is_list()) return kNoMatch;
      int worst = 0;
      for (const auto& x : v.to_list()) {
        int s = fit(x, elem);
        if (s == kNoMatch) return kNoMatch;
        worst = std::max(worst, s);
      }
      return worst;
    }
    default: return kNoMatch;
  }
}

IValue to_ivalue(Value&& v, const TypePtr& t, c10::optional<int32_t> n);

template <class T>
c10::List<T> to_typed_list(Value&& v, const TypePtr& elem) {
  c10::List<T> out;
  for (auto& x : v.to_list()) out.push_back(to_ivalue(std::move(x), elem, c10::nullopt).to<T>());
  return out;
}

IValue to_ivalue(Value&& v, const TypePtr& t, c10::optional<int32_t> n) {
  switch (t->kind()) {
    case TypeKind::OptionalType:
      if (v.is_none()) return IValue();
      return to_ivalue(std::move(v), t->castRaw<c10::OptionalType>()->getElementType(), n);
    case TypeKind::TensorType: return IValue(std::move(v.to_tensor()));
    case TypeKind::IntType:
    case TypeKind::SymIntType: return IValue(v.to_int());
    case TypeKind::FloatType:
    case TypeKind::SymFloatType: return IValue(v.is_int() ? double(v.to_int()) : v.to_double());
    case TypeKind::NumberType:
      if (v.is_int()) return IValue(v.to_int());
      if (v.is_bool()) return IValue(int64_t(v.to_bool()));
      return IValue(v.to_double());
    case TypeKind::BoolType: return IValue(v.to_bool());
    case TypeKind::StringType: return IValue(std::move(v.to_string_ref()));
    case TypeKind::DeviceObjType: return IValue(c10::Device(v.to_string_ref()));
    case TypeKind::ListType: {
      auto elem = t->castRaw<c10::ListType>()->getElementType();
      switch (elem->kind()) {
        case TypeKind::IntType:
        case TypeKind::SymIntType: return IValue(to_typed_list<int64_t>(std::move(v), elem));
        case TypeKind::FloatType: return IValue(to_typed_list<double>(std::move(v), elem));
        case TypeKind::BoolType: return IValue(to_typed_list<bool>(std::move(v), elem));
        case TypeKind::TensorType: return IValue(to_typed_list<at::Tensor>(std::move(v), elem));
        case TypeKind::OptionalType: return IValue(to_typed_list<c10::optional<at::Tensor>>(std::move(v), elem));
        default: {
          c10::impl::GenericList out(elem);
          for (auto& x : v.to_list()) out.push_back(to_ivalue(std::move(x), elem, c10::nullopt));
          return IValue(std::move(out));
        }
      }
    }
    default: return IValue();
  }
}

Value from_ivalue(const IValue& v) {
  if (v.isNone()) return Value();
  if (v.isTensor()) return Value(v.toTensor());
  if (v.isInt()) return Value(v.toInt());
  if (v.isDouble()) return Value(v.toDouble());
  if (v.isBool()) return Value(v.toBool());
  if (v.isString()) return Value(v.toStringRef());
  if (v.isDevice()) return Value(v.toDevice().str());
  if (v.isList()) {
    Value::List out;
    for (const auto& x : v.toListRef()) out.push_back(from_ivalue(x));
    return Value(std::move(out));
  }
  if (v.isTuple()) {
    Value::List out;
    for (const auto& x : v.toTupleRef().elements()) out.push_back(from_ivalue(x));
    return Value(std::move(out));
  }
  throw CallFailure{ErrorKind::Type, "an ATen operator returned a " + v.tagKind() + ", which castor cannot send"};
}

using OpList = std::vector<std::shared_ptr<torch::jit::Operator>>;

}  // namespace

const char* refused_builtin(const std::string& name) {
  // Found by listing every aten:: schema of libtorch 1.13 for file names,
  // paths and I/O: only these two touch the file system.
  if (name == "aten::from_file" || name == "aten::save")
    return "it reads or writes files on the callee's machine, which peers may not do";
  return nullptr;
}

namespace {

const OpList& overloads(const std::string& name) {
  // The JIT registry is global and grows only at library load; cache lookups.
  static std::mutex mtx;
  static std::unordered_map<std::string, OpList> cache;
  std::lock_guard<std::mutex> lock(mtx);
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  OpList ops;
  auto sep = name.find("::");
  if (sep != std::string::npos && sep + 2 < name.size() && name.find("::", sep + 2) == std::string::npos)
    ops = torch::jit::getAllOperatorsFor(c10::Symbol::fromQualString(name));
  return cache.emplace(name, std::move(ops)).first->second;
}

// The cost of calling `schema` with `args`, or kNoMatch.
int overload_cost(const c10::FunctionSchema& schema, const std::vector<Value>& args) {
  const auto& params = schema.arguments();
  size_t positional = 0;
  while (positional < params.size() && !params[positional].kwarg_only()) ++positional;
  if (args.size() > positional) return kNoMatch;
  int cost = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (i < args.size()) {
      int s = fit(args[i], params[i].type());
      if (s == kNoMatch && params[i].N() && args[i].is_int()) s = 1;  // int[2] given one int
      if (s == kNoMatch) return kNoMatch;
      cost += s;
    } else if (!params[i].default_value()) {
      return kNoMatch;
    }
  }
  return cost;
}

std::string describe_args(const std::vector<Value>& args) {
  std::string s = "(";
  for (size_t i = 0; i < args.size(); ++i) s += (i ? ", " : "") + std::string(args[i].type_name());
  return s + ")";
}

}  // namespace

Value call_builtin(const std::string& name, std::vector<Value>&& args) {
  const auto& ops = overloads(name);
  if (ops.empty()) throw CallFailure{ErrorKind::Lookup, "unknown builtin operator '" + name + "'"};
  const torch::jit::Operator* best = nullptr;
  int best_cost = kNoMatch;
  for (const auto& op : ops) {
    int c = overload_cost(op->schema(), args);
    if (c != kNoMatch && (best_cost == kNoMatch || c < best_cost)) {
      best = op.get();
      best_cost = c;
    }
  }
  if (!best) {
    std::string known;
    for (const auto& op : ops) known += "\n  " + c10::toString(op->schema());
    throw CallFailure{ErrorKind::Type,
                      "no overload of '" + name + "' takes " + describe_args(args) + "; overloads:" + known};
  }
  const auto& params = best->schema().arguments();
  torch::jit::Stack stack;
  stack.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    if (i < args.size()) {
      if (!args[i].is_list() && params[i].N() && params[i].type()->kind() == TypeKind::ListType) {
        Value::List repeated(size_t(*params[i].N()), args[i]);  // int[2] given one int
        stack.push_back(to_ivalue(Value(std::move(repeated)), params[i].type(), params[i].N()));
      } else {
        stack.push_back(to_ivalue(std::move(args[i]), params[i].type(), params[i].N()));
      }
    } else {
      stack.push_back(*params[i].default_value());
    }
  }
  best->getOperation()(stack);
  if (stack.size() == 1) return from_ivalue(stack[0]);
  Value::List out;
  for (const auto& x : stack) out.push_back(from_ivalue(x));
  return Value(std::move(out));
}

}  // namespace castor::detail
