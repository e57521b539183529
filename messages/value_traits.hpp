// ValueTraits<T>: how a C++ type becomes a Value and back. castor uses it for
// arguments and results; users may specialize it for their own types.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <c10/util/Optional.h>

#include "messages/value.hpp"

namespace castor {

/// Thrown by ValueTraits<T>::from_value when the Value holds something else.
/// `path` says where inside the value (e.g. "[2]" for a list's third item).
struct TypeMismatch {
  std::string expected;
  std::string given;
  std::string path;
};

/// The primary template marks a type castor cannot pass by value; using it
/// as an argument or result fails to compile with the explanation below. Such
/// a type can still live on a worker as a remote object (CASTOR_CLASS).
template <class T, class Enable = void>
struct ValueTraits {
  static constexpr bool unsupported = true;
  template <class U>
  static Value to_value(U&&) {
    static_assert(sizeof(U) == 0,
                  "castor cannot pass this type: use torch::Tensor, bool, an integer type, "
                  "float/double, std::string, std::vector<T>, std::optional<T>, std::tuple<...>, "
                  "castor::RRef<T>, or specialize castor::ValueTraits<T> with to_value, from_value "
                  "and name");
    return {};
  }
  template <class U = T>
  static U from_value(Value&&) {
    static_assert(sizeof(U) == 0,
                  "castor cannot receive this type: see ValueTraits<T>::to_value for what it can");
  }
  template <class U = T>
  static std::string name() {
    static_assert(sizeof(U) == 0, "castor cannot pass this type by value (see ValueTraits)");
    return {};
  }
};

/// Whether T travels by value (has ValueTraits) rather than staying on its
/// worker as a remote object.
template <class T, class = void>
struct is_wire_type : std::true_type {};
template <class T>
struct is_wire_type<T, std::void_t<decltype(ValueTraits<T>::unsupported)>> : std::false_type {};

namespace detail {
[[noreturn]] inline void mismatch(const std::string& expected, const Value& v) {
  throw TypeMismatch{expected, v.type_name(), ""};
}
}  // namespace detail

template <>
struct ValueTraits<Value> {
  static Value to_value(Value v) { return v; }
  static Value from_value(Value&& v) { return std::move(v); }
  static std::string name() { return "any"; }
};

template <>
struct ValueTraits<bool> {
  static Value to_value(bool x) { return Value(x); }
  static bool from_value(Value&& v) {
    if (!v.is_bool()) detail::mismatch(name(), v);
    return v.to_bool();
  }
  static std::string name() { return "bool"; }
};

template <class I>
struct ValueTraits<I, std::enable_if_t<std::is_integral<I>::value && !std::is_same<I, bool>::value>> {
  static Value to_value(I x) { return Value(int64_t(x)); }
  static I from_value(Value&& v) {
    if (!v.is_int()) detail::mismatch(name(), v);
    auto x = v.to_int();
    if constexpr (!std::is_same<I, int64_t>::value) {
      if (x < int64_t(std::numeric_limits<I>::min()) ||
          (x > 0 && uint64_t(x) > uint64_t(std::numeric_limits<I>::max())))
        throw TypeMismatch{name(), "int64 " + std::to_string(x) + " (out of range)", ""};
    }
    return I(x);
  }
  static std::string name() { return std::is_same<I, int64_t>::value ? "int64" : "integer"; }
};

template <class F>
struct ValueTraits<F, std::enable_if_t<std::is_floating_point<F>::value>> {
  static Value to_value(F x) { return Value(double(x)); }
  static F from_value(Value&& v) {
    if (v.is_double()) return F(v.to_double());
    if (v.is_int()) return F(v.to_int());  // ints widen, as C++ does
    detail::mismatch(name(), v);
  }
  static std::string name() { return "double"; }
};

template <>
struct ValueTraits<std::string> {
  static Value to_value(std::string x) { return Value(std::move(x)); }
  static std::string from_value(Value&& v) {
    if (!v.is_string()) detail::mismatch(name(), v);
    return std::move(v.to_string_ref());
  }
  static std::string name() { return "string"; }
};

template <>
struct ValueTraits<const char*> {
  static Value to_value(const char* x) { return Value(std::string(x)); }
  static std::string name() { return "string"; }
};

template <>
struct ValueTraits<at::Tensor> {
  static Value to_value(at::Tensor x) { return Value(std::move(x)); }
  static at::Tensor from_value(Value&& v) {
    if (!v.is_tensor()) detail::mismatch(name(), v);
    return std::move(v.to_tensor());
  }
  static std::string name() { return "Tensor"; }
};

template <class T>
struct ValueTraits<std::vector<T>> {
  static Value to_value(std::vector<T> xs) {
    Value::List out;
    out.reserve(xs.size());
    for (auto& x : xs) out.push_back(ValueTraits<T>::to_value(std::move(x)));
    return Value(std::move(out));
  }
  static std::vector<T> from_value(Value&& v) {
    if (!v.is_list()) detail::mismatch(name(), v);
    auto& items = v.to_list();
    std::vector<T> out;
    out.reserve(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      try {
        out.push_back(ValueTraits<T>::from_value(std::move(items[i])));
      } catch (TypeMismatch& m) {
        m.path = "[" + std::to_string(i) + "]" + m.path;
        throw;
      }
    }
    return out;
  }
  static std::string name() { return "list<" + ValueTraits<T>::name() + ">"; }
};

template <class T>
struct ValueTraits<std::optional<T>> {
  static Value to_value(std::optional<T> x) { return x ? ValueTraits<T>::to_value(std::move(*x)) : Value(); }
  static std::optional<T> from_value(Value&& v) {
    if (v.is_none()) return std::nullopt;
    return ValueTraits<T>::from_value(std::move(v));
  }
  static std::string name() { return "optional<" + ValueTraits<T>::name() + ">"; }
};

template <class T>
struct ValueTraits<c10::optional<T>> {
  static Value to_value(c10::optional<T> x) { return x ? ValueTraits<T>::to_value(std::move(*x)) : Value(); }
  static c10::optional<T> from_value(Value&& v) {
    if (v.is_none()) return c10::nullopt;
    return ValueTraits<T>::from_value(std::move(v));
  }
  static std::string name() { return "optional<" + ValueTraits<T>::name() + ">"; }
};

template <class... Ts>
struct ValueTraits<std::tuple<Ts...>> {
  static Value to_value(std::tuple<Ts...> xs) {
    Value::List out;
    std::apply([&](auto&... x) { (out.push_back(ValueTraits<std::decay_t<decltype(x)>>::to_value(std::move(x))), ...); }, xs);
    return Value(std::move(out));
  }
  static std::tuple<Ts...> from_value(Value&& v) {
    if (!v.is_list() || v.to_list().size() != sizeof...(Ts)) {
      if (v.is_list())
        throw TypeMismatch{name(), "list of " + std::to_string(v.to_list().size()) + " items", ""};
      detail::mismatch(name(), v);
    }
    return unpack(v.to_list(), std::index_sequence_for<Ts...>{});
  }
  static std::string name() {
    std::string s = "tuple<";
    bool first = true;
    ((s += (first ? "" : ", ") + ValueTraits<Ts>::name(), first = false), ...);
    return s + ">";
  }

 private:
  template <size_t... I>
  static std::tuple<Ts...> unpack(Value::List& items, std::index_sequence<I...>) {
    return std::tuple<Ts...>{element<Ts, I>(items)...};
  }
  template <class T, size_t I>
  static T element(Value::List& items) {
    try {
      return ValueTraits<T>::from_value(std::move(items[I]));
    } catch (TypeMismatch& m) {
      m.path = "[" + std::to_string(I) + "]" + m.path;
      throw;
    }
  }
};

template <class A, class B>
struct ValueTraits<std::pair<A, B>> {
  static Value to_value(std::pair<A, B> x) {
    return ValueTraits<std::tuple<A, B>>::to_value(std::tuple<A, B>(std::move(x.first), std::move(x.second)));
  }
  static std::pair<A, B> from_value(Value&& v) {
    auto t = ValueTraits<std::tuple<A, B>>::from_value(std::move(v));
    return {std::move(std::get<0>(t)), std::move(std::get<1>(t))};
  }
  static std::string name() { return ValueTraits<std::tuple<A, B>>::name(); }
};

/// The ValueTraits for what a caller passes: decays, and `const char[N]` is a string.
template <class T>
using traits_for = ValueTraits<std::conditional_t<std::is_array<std::remove_reference_t<T>>::value ||
                                                      std::is_same<std::decay_t<T>, const char*>::value ||
                                                      std::is_same<std::decay_t<T>, char*>::value,
                                                  std::string, std::decay_t<T>>>;

}  // namespace castor
