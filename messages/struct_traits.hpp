// User structs on the wire: CASTOR_STRUCT(Batch, x, step, lrs, tag) lets an
// aggregate travel as a call's argument or result (and in an RRef), with
// nested structs, vectors, maps, optionals, tensors and RRefs inside. Also
// std::map's traits.
//
// Note [User structs]
// ~~~~~~~~~~~~~~~~~~~
//  S1. The fields are named once, after the type. The macro goes in the
//      struct's own namespace: it defines a function castor finds by ADL,
//      not a specialization inside castor.
//  S2. A struct travels as a list: its schema fingerprint first, then its
//      fields in the order named. The fingerprint spells the type's name
//      and every field's name and wire type ("Batch{x:Tensor, step:int64,
//      ...}"), so a peer built with another definition gets a TypeError
//      that shows both schemas instead of fields read into the wrong slots.
//  S3. The struct must be default-constructible (fields are assigned one
//      by one on arrival); a field that does not convert names its path
//      (".step").
//  S4. std::map<K, V> travels as a list of [key, value] pairs, in key order.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "messages/value_traits.hpp"

namespace castor {
namespace detail {

template <class T, class... P>
struct StructDescription {
  const char* type;
  const char* fields;  // as written: "x, step, lrs, tag"
  std::tuple<P...> members;
};

template <class T, class... P>
StructDescription<T, P...> describe_struct(const char* type, const char* fields, P... members) {
  return StructDescription<T, P...>{type, fields, std::tuple<P...>(members...)};
}

/// The names of "x, step, lrs" (S1).
inline std::vector<std::string> split_field_names(const char* fields) {
  std::vector<std::string> out(1);
  for (const char* c = fields; *c; ++c) {
    if (*c == ',')
      out.emplace_back();
    else if (*c != ' ' && *c != '\t' && *c != '\n')
      out.back() += *c;
  }
  return out;
}

template <class T, class = void>
struct has_struct_hook : std::false_type {};
template <class T>
struct has_struct_hook<T, std::void_t<decltype(castor_struct_description(static_cast<const T*>(nullptr)))>>
    : std::true_type {};

template <class M>
struct member_type;
template <class C, class F>
struct member_type<F C::*> {
  using type = F;
};

}  // namespace detail

template <class T>
struct ValueTraits<T, std::enable_if_t<detail::has_struct_hook<T>::value>> {
  static Value to_value(T x) {
    Value::List out;
    out.push_back(Value(fingerprint()));
    std::apply(
        [&](auto... member) {
          (out.push_back(ValueTraits<typename detail::member_type<decltype(member)>::type>::to_value(
               std::move(x.*member))),
           ...);
        },
        description().members);
    return Value(std::move(out));
  }

  static T from_value(Value&& v) {
    constexpr size_t fields = std::tuple_size<decltype(description().members)>::value;
    if (!v.is_list() || v.to_list().empty() || !v.to_list()[0].is_string()) detail::mismatch(name(), v);
    auto& items = v.to_list();
    if (items[0].to_string_ref() != fingerprint() || items.size() != fields + 1)  // S2
      throw TypeMismatch{fingerprint(), "struct " + items[0].to_string_ref(), ""};
    T out{};
    size_t i = 1;
    std::apply([&](auto... member) { (assign(out.*member, items[i], i), ...); }, description().members);
    return out;
  }

  static std::string name() { return description().type; }

  /// S2: the schema both sides must agree on.
  static const std::string& fingerprint() {
    static const std::string text = [] {
      auto names = detail::split_field_names(description().fields);
      std::string s = std::string(description().type) + "{";
      size_t i = 0;
      std::apply(
          [&](auto... member) {
            ((s += (i ? ", " : "") + (i < names.size() ? names[i] : "?") + ":" +
                   ValueTraits<typename detail::member_type<decltype(member)>::type>::name(),
              ++i),
             ...);
          },
          description().members);
      return s + "}";
    }();
    return text;
  }

 private:
  static auto description() { return castor_struct_description(static_cast<const T*>(nullptr)); }

  template <class F>
  static void assign(F& field, Value& item, size_t& i) {
    try {
      field = ValueTraits<F>::from_value(std::move(item));
    } catch (TypeMismatch& m) {  // S3: the path names the field
      auto names = detail::split_field_names(description().fields);
      m.path = "." + (i - 1 < names.size() ? names[i - 1] : std::to_string(i - 1)) + m.path;
      throw;
    }
    ++i;
  }
};

/// S4.
template <class K, class V, class C, class A>
struct ValueTraits<std::map<K, V, C, A>> {
  static Value to_value(std::map<K, V, C, A> x) {
    Value::List out;
    out.reserve(x.size());
    for (auto& [k, v] : x) {
      Value::List pair;
      pair.push_back(ValueTraits<K>::to_value(K(k)));
      pair.push_back(ValueTraits<V>::to_value(std::move(v)));
      out.push_back(Value(std::move(pair)));
    }
    return Value(std::move(out));
  }
  static std::map<K, V, C, A> from_value(Value&& v) {
    auto pairs = ValueTraits<std::vector<std::tuple<K, V>>>::from_value(std::move(v));
    std::map<K, V, C, A> out;
    for (auto& [k, val] : pairs) out.emplace(std::move(k), std::move(val));
    return out;
  }
  static std::string name() { return "map<" + ValueTraits<K>::name() + ", " + ValueTraits<V>::name() + ">"; }
};

}  // namespace castor

#define CASTOR_DETAIL_STRUCT_CAT_(a, b) a##b
#define CASTOR_DETAIL_STRUCT_CAT(a, b) CASTOR_DETAIL_STRUCT_CAT_(a, b)
#define CASTOR_DETAIL_COUNT_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, N, ...) N
#define CASTOR_DETAIL_COUNT(...) \
  CASTOR_DETAIL_COUNT_(__VA_ARGS__, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define CASTOR_DETAIL_MP_1(T, a) &T::a
#define CASTOR_DETAIL_MP_2(T, a, ...) &T::a, CASTOR_DETAIL_MP_1(T, __VA_ARGS__)
#define CASTOR_DETAIL_MP_3(T, a, ...) &T::a, CASTOR_DETAIL_MP_2(T, __VA_ARGS__)
#define CASTOR_DETAIL_MP_4(T, a, ...) &T::a, CASTOR_DETAIL_MP_3(T, __VA_ARGS__)
#define CASTOR_DETAIL_MP_5(T, a, ...) &T::a, CASTOR_DETAIL_MP_4(T, __VA_ARGS__)
#define CASTOR_DETAIL_MP_6(T, a, ...) &T::a, CASTOR_DETAIL_MP_5(T, __VA_ARGS__)
#define CASTOR_DETAIL_MP_7(T, a, ...) &T::a, CASTOR_DETAIL_MP_6(T, __VA_ARGS__)
#define CASTOR_DETAIL_MP_8(T, a, ...) &T::a, CASTOR_DETAIL_MP_7(T, __VA_ARGS__)
#define CASTOR_DETAIL_MP_9(T, a, ...) &T::a, CASTOR_DETAIL_MP_8(T, __VA_ARGS__)
#define CASTOR_DETAIL_MP_10(T, a, ...) &T::a, CASTOR_DETAIL_MP_9(T, __VA_ARGS__)
#define CASTOR_DETAIL_MP_11(T, a, ...) &T::a, CASTOR_DETAIL_MP_10(T, __VA_ARGS__)
#define CASTOR_DETAIL_MP_12(T, a, ...) &T::a, CASTOR_DETAIL_MP_11(T, __VA_ARGS__)
#define CASTOR_DETAIL_MP_13(T, a, ...) &T::a, CASTOR_DETAIL_MP_12(T, __VA_ARGS__)
#define CASTOR_DETAIL_MP_14(T, a, ...) &T::a, CASTOR_DETAIL_MP_13(T, __VA_ARGS__)
#define CASTOR_DETAIL_MP_15(T, a, ...) &T::a, CASTOR_DETAIL_MP_14(T, __VA_ARGS__)
#define CASTOR_DETAIL_MP_16(T, a, ...) &T::a, CASTOR_DETAIL_MP_15(T, __VA_ARGS__)

/// Note [User structs]: lets `Type` travel, its fields named once (up to 16):
///   struct Batch { torch::Tensor x; int64_t step; std::vector<double> lrs; std::optional<std::string> tag; };
///   CASTOR_STRUCT(Batch, x, step, lrs, tag);
/// Write it in the struct's own namespace, at namespace scope.
#define CASTOR_STRUCT(Type, ...)                                                                         \
  [[maybe_unused]] inline auto castor_struct_description(const Type*) {                                  \
    return ::castor::detail::describe_struct<Type>(                                                      \
        #Type, #__VA_ARGS__,                                                                             \
        CASTOR_DETAIL_STRUCT_CAT(CASTOR_DETAIL_MP_, CASTOR_DETAIL_COUNT(__VA_ARGS__))(Type, __VA_ARGS__)); \
  }                                                                                                      \
  static_assert(true, "CASTOR_STRUCT ends with a semicolon")
