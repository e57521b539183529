// Deduces a callable's parameter and return types (lambdas, function pointers,
// std::function, member functions).
#pragma once

#include <functional>
#include <tuple>
#include <type_traits>

namespace castor::detail {

template <class... Ts>
struct type_list {
  static constexpr size_t size = sizeof...(Ts);
  using tuple = std::tuple<Ts...>;  // for std::tuple_element
};

template <class F, class = void>
struct function_traits;

template <class R, class... A>
struct function_traits<R (*)(A...)> {
  using result = R;
  using args = type_list<A...>;
};
template <class R, class... A>
struct function_traits<R (*)(A...) noexcept> : function_traits<R (*)(A...)> {};
template <class R, class... A>
struct function_traits<R(A...)> : function_traits<R (*)(A...)> {};

// Member functions: the object is not part of `args`.
template <class C, class R, class... A>
struct function_traits<R (C::*)(A...)> : function_traits<R (*)(A...)> {
  using object = C;
};
template <class C, class R, class... A>
struct function_traits<R (C::*)(A...) const> : function_traits<R (*)(A...)> {
  using object = C;
};
template <class C, class R, class... A>
struct function_traits<R (C::*)(A...) noexcept> : function_traits<R (C::*)(A...)> {};
template <class C, class R, class... A>
struct function_traits<R (C::*)(A...) const noexcept> : function_traits<R (C::*)(A...) const> {};

// Lambdas and other function objects: through operator().
template <class F>
struct function_traits<F, std::void_t<decltype(&F::operator())>> : function_traits<decltype(&F::operator())> {};

}  // namespace castor::detail
