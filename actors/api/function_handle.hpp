// Typed handles to registered functions: what CASTOR_FUNCTION(t_add, ...)
// defines as `t_add`, so that `w.rpc_sync("worker1", t_add, a, b)` knows the
// result type and checks the arguments at compile time. Also the checks the
// typed calls of Worker and RRef share.
//
// Note [Typed handles]
// ~~~~~~~~~~~~~~~~~~~~
//  H1. A handle is the function's name and, in its type, its signature:
//      FunctionHandle<R(A...)>. Calls still travel by name, so a handle and
//      the string form reach the same registration; a handle converts to
//      its name wherever a string is taken.
//  H2. A typed call checks at compile time that it gives as many arguments
//      as the function takes (a trailing castor::Timeout aside) and that
//      each converts to its parameter (as the string form allows, a T
//      where an RRef<T> is taken, and an RRef<T> where a T is taken: the
//      callee resolves it to its value, so T must be one that the
//      parameter's type reads back, see value_fits), and converts each to its parameter's
//      type before it travels (an int given for a double goes as a
//      double); the result is R, or V for a function returning Future<V>. The static_assert says which rule failed; the
//      compiler's note "required from ..." shows both type lists.
//  H3. For a function defined in another file, a header declares the handle
//      with CASTOR_FUNCTION_DECL(name, R(A...)), and that file registers the
//      function with CASTOR_FUNCTION_DEF(name, callable): a callable whose
//      signature differs from the declaration does not compile.
//  H4. A named function is its own handle: CASTOR_FUNCTION(f, f) would
//      define a second `f`, so write CASTOR_FUNCTION_DEF(f, f), and pass f
//      itself (`w.rpc_sync("worker1", f, ...)`): its address finds its
//      registered name at run time (a function never registered fails the
//      call with a LookupError naming the cause).
//  H5. w.remote<T>(to, args...) constructs an object of the registered
//      class T; T must be constructible from the arguments (checked at
//      compile time; the arguments travel as given, since the registered
//      constructor is chosen at run time by arity). When the first argument is a string or a handle, the
//      call is the older remote<T>(to, "Name", args...): to pass a string
//      as a constructor's first argument, name the class too,
//      remote<T>(to, "T", "text", ...).
//  H6. A method is called through its member pointer,
//      rref.rpc_sync(&Counter::add, 5): the arguments are checked as in H2
//      and the pointer finds the name it was registered under with
//      CASTOR_CLASS(Counter).method("add", &Counter::add); one never
//      registered fails at run time with a LookupError naming the class.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "actors/api/function_traits.hpp"
#include "actors/api/future.hpp"
#include "actors/api/worker_options.hpp"

namespace castor {

template <class T>
class RRef;
class Value;

template <class Signature>
struct FunctionHandle;

/// H1: a registered function's name, with its signature in the type.
template <class R, class... A>
struct FunctionHandle<R(A...)> {
  const char* name;
  operator std::string() const { return name; }
};

namespace detail {

// -- the signature behind a handle or a function -------------------------------

template <class R, class List>
struct handle_from;
template <class R, class... A>
struct handle_from<R, type_list<A...>> {
  using type = FunctionHandle<R(A...)>;
};

/// The handle type of a callable (what CASTOR_FUNCTION defines).
template <class F>
using handle_of_t = typename handle_from<typename function_traits<std::decay_t<F>>::result,
                                         typename function_traits<std::decay_t<F>>::args>::type;

template <class H>
struct callable_handle : std::false_type {};
template <class R, class... A>
struct callable_handle<FunctionHandle<R(A...)>> : std::true_type {
  using result = R;
  using params = type_list<A...>;
};
template <class R, class... A>
struct callable_handle<R(A...)> : callable_handle<FunctionHandle<R(A...)>> {};  // H4
template <class R, class... A>
struct callable_handle<R (*)(A...)> : callable_handle<FunctionHandle<R(A...)>> {};
template <class R, class... A>
struct callable_handle<R(A...) noexcept> : callable_handle<FunctionHandle<R(A...)>> {};
template <class R, class... A>
struct callable_handle<R (*)(A...) noexcept> : callable_handle<FunctionHandle<R(A...)>> {};

template <class H>
using is_callable_handle = callable_handle<std::remove_cv_t<std::remove_reference_t<H>>>;

/// What the caller gets from a function returning R: R, or V for Future<V>.
template <class R>
using call_result_t = typename unwrap_future<std::decay_t<R>>::type;

// -- H2: the argument checks -----------------------------------------------------

template <class T, class List>
struct prepend;
template <class T, class... Ts>
struct prepend<T, type_list<Ts...>> {
  using type = type_list<T, Ts...>;
};

/// The options that may close a call's arguments: castor::Timeout, and for
/// remote() castor::Restart.
template <class A>
struct is_call_option
    : std::integral_constant<bool, std::is_same<std::decay_t<A>, Timeout>::value ||
                                       std::is_same<std::decay_t<A>, Restart>::value> {};

template <class... A>
struct all_options : std::integral_constant<bool, (is_call_option<A>::value && ...)> {};

template <class... A>
inline constexpr bool has_restart_v = (std::is_same<std::decay_t<A>, Restart>::value || ...);

/// The arguments without the trailing options (Timeout, Restart).
template <class... A>
struct without_timeout {
  using type = type_list<>;
};
template <class A0, class... As>
struct without_timeout<A0, As...> {
  using type = std::conditional_t<is_call_option<A0>::value && all_options<As...>::value, type_list<>,
                                  typename prepend<A0, typename without_timeout<As...>::type>::type>;
};

/// T for Box<T> (RRef<T>, std::vector<T>), else void.
template <template <class...> class Box, class P>
struct boxed {
  using type = void;
};
template <template <class...> class Box, class T, class... Rest>
struct boxed<Box, Box<T, Rest...>> {
  using type = T;
};

template <class T>
constexpr bool is_plain_integer = std::is_integral<T>::value && !std::is_same<T, bool>::value;

/// T for an optional (std::optional<T>, c10::optional<T>: what has a
/// value_type and has_value()), else void.
template <class P, class = void>
struct optional_value {
  using type = void;
};
template <class P>
struct optional_value<P, std::void_t<typename P::value_type, decltype(std::declval<const P&>().has_value())>> {
  using type = typename P::value_type;
};

/// Whether a G that an RRef's owner sends as its value (ValueTraits<G>::
/// to_value) is taken by the callee's ValueTraits<P>::from_value. Where
/// from_value's rules are arithmetic they are followed exactly (a bool only
/// from a bool; an integer from an integer, range-checked there; a floating
/// point from either), so RRef<double> for an int64_t, which C++ would
/// convert, fails here and not on the callee. Optionals and lists are looked
/// into; a Value takes anything; the rest (tensors, strings, tuples, user
/// structs) fits as C++ converts it.
template <class G, class P>
constexpr bool value_fits() {
  using OptionalOfP = typename optional_value<P>::type;
  using OptionalOfG = typename optional_value<G>::type;
  using ListOfP = typename boxed<std::vector, P>::type;
  using ListOfG = typename boxed<std::vector, G>::type;
  if constexpr (std::is_same<G, P>::value || std::is_same<P, Value>::value)
    return true;
  else if constexpr (std::is_same<P, bool>::value)
    return std::is_same<G, bool>::value;
  else if constexpr (is_plain_integer<P>)
    return is_plain_integer<G>;
  else if constexpr (std::is_floating_point<P>::value)
    return is_plain_integer<G> || std::is_floating_point<G>::value;
  else if constexpr (!std::is_void<OptionalOfP>::value && !std::is_void<OptionalOfG>::value)
    return value_fits<OptionalOfG, OptionalOfP>();
  else if constexpr (!std::is_void<OptionalOfP>::value)
    return value_fits<G, OptionalOfP>();
  else if constexpr (!std::is_void<ListOfP>::value && !std::is_void<ListOfG>::value)
    return value_fits<ListOfG, ListOfP>();
  else
    return std::is_convertible<G, P>::value;
}

template <class P, class A>
constexpr bool argument_fits() {
  using Param = std::decay_t<P>;
  if constexpr (std::is_convertible<A, Param>::value) return true;
  using Target = typename boxed<RRef, Param>::type;  // a T is sent where an RRef<T> is taken
  if constexpr (!std::is_void<Target>::value) return std::is_convertible<A, Target>::value;
  using Given = typename boxed<RRef, std::decay_t<A>>::type;  // an RRef<T> where a T is taken: resolved there
  if constexpr (!std::is_void<Given>::value) return value_fits<Given, Param>();
  return false;
}

template <class Params, class Args>
struct arguments_fit;
template <class... P, class... A>
struct arguments_fit<type_list<P...>, type_list<A...>> {
  static constexpr bool count = sizeof...(P) == sizeof...(A);
  static constexpr bool types() {
    if constexpr (sizeof...(P) == sizeof...(A))
      return (argument_fits<P, A>() && ...);
    else
      return true;  // the count's assertion speaks
  }
};

/// H2, for functions and methods alike.
template <class Params, class... Args>
constexpr void check_arguments() {
  using fit = arguments_fit<Params, typename without_timeout<Args...>::type>;
  static_assert(fit::count,
                "castor: this call gives a different number of arguments than the function or method takes "
                "(see Note [Typed handles], H2; the 'required from' note shows both type lists)");
  static_assert(fit::types(),
                "castor: an argument of this call does not convert to the type of its parameter "
                "(see Note [Typed handles], H2; the 'required from' note shows both type lists)");
}

/// A handle's name; a function's registered name (H4), or a LookupError.
template <class R, class... A>
std::string handle_name(const FunctionHandle<R(A...)>& h) {
  return h.name;
}
std::string registered_name_or_throw(void (*address)());
template <class F, std::enable_if_t<std::is_function<F>::value, int> = 0>
std::string handle_name(F& f) {
  return registered_name_or_throw(reinterpret_cast<void (*)()>(&f));
}
template <class F, std::enable_if_t<std::is_function<F>::value, int> = 0>
std::string handle_name(F* f) {
  return registered_name_or_throw(reinterpret_cast<void (*)()>(f));
}

}  // namespace detail
}  // namespace castor
