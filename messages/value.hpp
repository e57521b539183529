// Value: what travels as an argument or a result of a call (none, bool, int64,
// double, string, Tensor, list, RRef fork), with its wire format.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include <ATen/core/Tensor.h>

#include <caf/fwd.hpp>

#include "messages/ids.hpp"

namespace castor {

struct RestartRecipe;

/// What a fork of an RRef carries on the wire (see Note [RRef protocol] in
/// rref/rref_context.hpp): who owns the value, which value, which fork, who
/// made the fork (the parent), and the C++ type of the value. An RRef made
/// with castor::Restart also carries how to make its value again, and which
/// life of the owner holds it (Note [Restartable values], rref/restart.hpp).
struct RRefForkData {
  RRefForkData() = default;
  RRefForkData(WorkerId owner_, RRefId rref, ForkId fork, WorkerId parent_, std::string type,
               uint32_t owner_life = 0, uint32_t restarts_ = 0, std::shared_ptr<const RestartRecipe> recipe_ = nullptr)
      : owner(owner_),
        rref_id(rref),
        fork_id(fork),
        parent(parent_),
        type_name(std::move(type)),
        owner_incarnation(owner_life),
        restarts(restarts_),
        recipe(std::move(recipe_)) {}

  WorkerId owner = -1;
  RRefId rref_id;
  ForkId fork_id;
  WorkerId parent = -1;
  std::string type_name;
  uint32_t owner_incarnation = 0;  // the owner's life that holds the value (0: not said)
  uint32_t restarts = 0;           // re-creations so far; a request with restarts > 0 re-creates (RS2)
  std::shared_ptr<const RestartRecipe> recipe;  // castor::Restart: how to make the value again

  friend bool operator==(const RRefForkData& a, const RRefForkData& b) {
    return a.owner == b.owner && a.rref_id == b.rref_id && a.fork_id == b.fork_id &&
           a.parent == b.parent && a.type_name == b.type_name && a.owner_incarnation == b.owner_incarnation &&
           a.restarts == b.restarts && (a.recipe == nullptr) == (b.recipe == nullptr);
  }
};

/// An RRef inside a Value. On the wire it is a fork (`data`, with a fork id
/// and parent); inside a worker it is a local reference: `handle` keeps the
/// RRef's local state alive (owned by the rref/ layer, opaque here).
struct RRefValue {
  RRefForkData data;
  std::shared_ptr<void> handle;
};

/// A tensor whose bytes travel outside the message (bulk path, or chunks for
/// tensors above BASP's frame limit). Never seen by users: the receiving worker
/// resolves it to a Tensor before the message is handed on.
struct ExternalTensor {
  TransferId transfer;
  int8_t dtype = 0;  // wire dtype code, see tensor_wire.hpp
  std::vector<int64_t> sizes;
  bool requires_grad = false;
};

class Value {
 public:
  enum class Kind : uint8_t { None = 0, Bool, Int, Double, String, Tensor, List, RRef, External };
  using List = std::vector<Value>;

  Value() = default;
  Value(std::nullptr_t) {}
  Value(bool x) : data_(x) {}
  // Every integer type widens to int64 and float to double, as C++ does.
  template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  Value(I x) : data_(int64_t(x)) {}
  Value(double x) : data_(x) {}
  Value(float x) : data_(double(x)) {}
  Value(std::string x) : data_(std::move(x)) {}
  Value(const char* x) : data_(std::string(x)) {}
  Value(at::Tensor x) : data_(std::move(x)) {}
  Value(List x) : data_(ListBox{std::move(x)}) {}
  Value(RRefForkData x) : data_(RRefValue{std::move(x), nullptr}) {}
  Value(RRefValue x) : data_(std::move(x)) {}
  Value(ExternalTensor x) : data_(std::move(x)) {}

  Kind kind() const { return Kind(data_.index()); }
  bool is_none() const { return kind() == Kind::None; }
  bool is_bool() const { return kind() == Kind::Bool; }
  bool is_int() const { return kind() == Kind::Int; }
  bool is_double() const { return kind() == Kind::Double; }
  bool is_string() const { return kind() == Kind::String; }
  bool is_tensor() const { return kind() == Kind::Tensor; }
  bool is_list() const { return kind() == Kind::List; }
  bool is_rref() const { return kind() == Kind::RRef; }
  bool is_external() const { return kind() == Kind::External; }

  bool to_bool() const { return std::get<bool>(data_); }
  int64_t to_int() const { return std::get<int64_t>(data_); }
  double to_double() const { return std::get<double>(data_); }
  const std::string& to_string_ref() const { return std::get<std::string>(data_); }
  std::string& to_string_ref() { return std::get<std::string>(data_); }
  const at::Tensor& to_tensor() const { return std::get<at::Tensor>(data_); }
  at::Tensor& to_tensor() { return std::get<at::Tensor>(data_); }
  const List& to_list() const { return std::get<ListBox>(data_).items; }
  List& to_list() { return std::get<ListBox>(data_).items; }
  const RRefForkData& to_rref() const { return std::get<RRefValue>(data_).data; }
  RRefForkData& to_rref() { return std::get<RRefValue>(data_).data; }
  const RRefValue& to_rref_value() const { return std::get<RRefValue>(data_); }
  RRefValue& to_rref_value() { return std::get<RRefValue>(data_); }
  const ExternalTensor& to_external() const { return std::get<ExternalTensor>(data_); }

  /// Short name of the held kind, as error messages show it.
  const char* type_name() const { return kind_name(kind()); }
  static const char* kind_name(Kind k);

  /// Human-readable rendering for logs and error messages (tensors as shapes).
  std::string debug_string() const;

  /// A copy whose tensors own fresh storage: what a call to the same worker
  /// gets, so that a value passed "by copy" stays a copy without serializing.
  Value deep_copy() const;

  /// A copy whose tensors are differentiable clones (they stay in the autograd
  /// graph): what a call to the same worker gets inside an autograd context.
  Value clone_with_graph() const;

  /// Visits every RRef (also inside lists).
  template <class F>
  void for_each_rref(F&& f) {
    if (is_rref()) {
      f(to_rref_value());
    } else if (is_list()) {
      for (auto& x : to_list()) x.for_each_rref(f);
    }
  }
  bool contains_rref() const {
    if (is_rref()) return true;
    if (is_list())
      for (const auto& x : to_list())
        if (x.contains_rref()) return true;
    return false;
  }

  /// Visits every tensor (also inside lists), e.g. to attach autograd functions.
  template <class F>
  void for_each_tensor(F&& f) {
    if (is_tensor()) {
      f(to_tensor());
    } else if (is_list()) {
      for (auto& x : to_list()) x.for_each_tensor(f);
    }
  }

 private:
  struct ListBox {
    List items;
  };
  std::variant<std::monostate, bool, int64_t, double, std::string, at::Tensor, ListBox,
               RRefValue, ExternalTensor>
      data_;
};

/// castor::Restart: what remote() ran to make a value, kept by every holder
/// of the RRef so that the owner's next life can run it again (Note
/// [Restartable values] in rref/restart.hpp). The arguments hold no RRef.
struct RestartRecipe {
  std::string function;     // the registered function or class remote() named
  std::vector<Value> args;  // its arguments, as they were sent
  uint32_t max_restarts = 0;
};

// -- wire format (messages/value_wire.cpp) --------------------------------------
// Non-template overloads: CAF 0.17 hands every custom type to `inspect` with
// the abstract `caf::serializer` or `caf::deserializer`. Decoding checks every
// length against the bytes left, caps list nesting, and validates tensors.
caf::error inspect(caf::serializer& f, Value& x);
caf::error inspect(caf::deserializer& f, Value& x);
caf::error inspect(caf::serializer& f, RRefForkData& x);
caf::error inspect(caf::deserializer& f, RRefForkData& x);

/// For CAF's other inspectors (to_string, logging): a readable summary.
template <class Inspector>
typename std::enable_if<!std::is_base_of<caf::serializer, Inspector>::value &&
                            !std::is_base_of<caf::deserializer, Inspector>::value,
                        typename Inspector::result_type>::type
inspect(Inspector& f, Value& x) {
  auto text = x.debug_string();
  return f(text);
}

template <class Inspector>
typename std::enable_if<!std::is_base_of<caf::serializer, Inspector>::value &&
                            !std::is_base_of<caf::deserializer, Inspector>::value,
                        typename Inspector::result_type>::type
inspect(Inspector& f, RRefForkData& x) {
  return f(x.owner, x.rref_id, x.fork_id, x.parent, x.type_name);
}

}  // namespace castor
