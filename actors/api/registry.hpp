// The function registry: CASTOR_FUNCTION registers a callable at static
// initialisation under its name; a call looks it up and the invoker converts
// and checks the arguments. Classes (CASTOR_CLASS) live in rref/.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "actors/api/errors.hpp"
#include "actors/api/function_handle.hpp"
#include "actors/api/function_traits.hpp"
#include "actors/api/future.hpp"
#include "messages/value.hpp"
#include "messages/value_traits.hpp"

namespace castor::detail {

/// How a call ended: a value or an error.
struct Outcome {
  bool ok = false;
  Value value;
  ErrorInfo error;

  static Outcome success(Value v) { return Outcome{true, std::move(v), {}}; }
  static Outcome failure(ErrorInfo e) { return Outcome{false, Value(), std::move(e)}; }
};

/// Called exactly once with the outcome of an invocation.
using Completion = std::function<void(Outcome)>;

/// Runs a registered callable on converted arguments. Throws CallFailure for
/// argument errors; the outcome (value, user exception, async result) goes to
/// `done`, possibly later (functions returning a Future).
using Invoker = std::function<void(std::vector<Value>&& args, Completion done)>;

/// An argument error found before the user's code ran.
struct CallFailure {
  ErrorKind kind;
  std::string message;  // without the worker name; the worker prefixes it
};

/// One parameter as the registry knows it (used to convert arguments, e.g.
/// a T passed where the function takes RRef<T>).
struct ParamInfo {
  std::string type;    // ValueTraits<T>::name()
  bool is_rref = false;
};

struct FunctionEntry {
  std::string name;
  std::vector<ParamInfo> params;
  std::string result;
  Invoker invoke;

  /// "name(Tensor, Tensor) -> Tensor": compared across workers at init.
  std::string signature() const;
};

class FunctionRegistry {
 public:
  static FunctionRegistry& instance();

  /// Registers `e`; a second entry under the same name is recorded as a
  /// problem (reported by init_rpc), the first one stays.
  void add(FunctionEntry e);

  const FunctionEntry* find(const std::string& name) const;

  /// H4 of Note [Typed handles]: a function registered by its address.
  void add_address(void (*address)(), const std::string& name) { by_address_.emplace(address, name); }
  std::string name_of_address(void (*address)()) const;

  /// Sorted signatures of every registered function, for the init check.
  std::vector<std::string> signatures() const;

  /// Registration problems (duplicates), empty when all is well.
  const std::vector<std::string>& problems() const { return problems_; }
  void add_problem(std::string p) { problems_.push_back(std::move(p)); }

 private:
  std::unordered_map<std::string, FunctionEntry> entries_;
  std::map<void (*)(), std::string> by_address_;
  std::vector<std::string> problems_;
};

/// Adds the registration problems of extension registries (classes).
void add_signature_source(std::function<std::vector<std::string>()> source);
std::vector<std::string> all_signatures();

// -- invokers ------------------------------------------------------------------

template <class T>
struct is_rref_param : std::false_type {};

template <class T>
ParamInfo param_info() {
  return ParamInfo{ValueTraits<std::decay_t<T>>::name(), is_rref_param<std::decay_t<T>>::value};
}

/// Converts argument `index` of `what` ("function 'f'", "method 'C.m'").
template <class T>
std::decay_t<T> convert_argument(Value&& v, size_t index, const std::string& what) {
  try {
    return ValueTraits<std::decay_t<T>>::from_value(std::move(v));
  } catch (const TypeMismatch& m) {
    throw CallFailure{ErrorKind::Type, what + " argument " + std::to_string(index + 1) + m.path + ": expected " +
                                           m.expected + ", got " + m.given};
  }
}

/// Delivers a callable's result (a value, nothing, or a Future) to `done`.
template <class R, class Call>
void deliver_result(Call&& call, Completion& done) {
  if constexpr (is_future<R>::value) {
    using V = typename R::value_type;
    R fut = call();
    fut.state()->add_executor_callback([fut, done]() mutable {
      const auto& core = fut.state();
      if (auto e = core->error()) return done(Outcome::failure(std::move(*e)));
      if constexpr (std::is_void<V>::value) {
        done(Outcome::success(Value()));
      } else {
        Value v;
        try {
          v = ValueTraits<V>::to_value(core->value_ref());
        } catch (...) {  // on the completing thread: it goes to the caller, not to whoever completed
          return done(Outcome::failure(error_from_exception(std::current_exception())));
        }
        done(Outcome::success(std::move(v)));
      }
    });
  } else if constexpr (std::is_void<R>::value) {
    call();
    done(Outcome::success(Value()));
  } else {
    done(Outcome::success(ValueTraits<std::decay_t<R>>::to_value(call())));
  }
}

/// The arity error text shared by functions and methods.
std::string arity_message(const std::string& what, const std::vector<ParamInfo>& params, size_t given);

template <class... A>
std::vector<ParamInfo> params_of(type_list<A...>) {
  return std::vector<ParamInfo>{param_info<A>()...};
}

template <class F, class R, class... A, size_t... I>
Invoker make_invoker_impl(std::string name, F f, type_list<A...>, std::index_sequence<I...>) {
  auto params = params_of(type_list<A...>{});
  auto what = "function '" + name + "'";
  return [what, f = std::move(f), params](std::vector<Value>&& args, Completion done) mutable {
    if (args.size() != sizeof...(A)) throw CallFailure{ErrorKind::Type, arity_message(what, params, args.size())};
    std::tuple<std::decay_t<A>...> converted{convert_argument<A>(std::move(args[I]), I, what)...};
    deliver_result<R>([&]() -> R { return f(std::move(std::get<I>(converted))...); }, done);
  };
}

template <class F>
FunctionEntry make_function_entry(std::string name, F f) {
  using traits = function_traits<std::decay_t<F>>;
  using R = typename traits::result;
  using Args = typename traits::args;
  FunctionEntry e;
  e.name = name;
  e.params = params_of(Args{});
  if constexpr (is_future<R>::value) {
    using V = typename R::value_type;
    if constexpr (std::is_void<V>::value)
      e.result = "Future<None>";
    else
      e.result = "Future<" + ValueTraits<V>::name() + ">";
  } else if constexpr (std::is_void<R>::value) {
    e.result = "None";
  } else {
    e.result = ValueTraits<std::decay_t<R>>::name();
  }
  e.invoke = make_invoker_impl<std::decay_t<F>, R>(std::move(name), std::move(f), Args{},
                                                    std::make_index_sequence<Args::size>{});
  return e;
}

/// What CASTOR_FUNCTION expands to: registers `f` under `name` at static
/// initialisation and returns its handle (Note [Typed handles]).
template <class F>
handle_of_t<F> register_function(const char* name, F f) {
  if constexpr (std::is_pointer<F>::value && std::is_function<std::remove_pointer_t<F>>::value)
    FunctionRegistry::instance().add_address(reinterpret_cast<void (*)()>(f), name);  // H4
  FunctionRegistry::instance().add(make_function_entry(name, std::move(f)));
  return handle_of_t<F>{name};
}

/// CASTOR_FUNCTION_DEF: H3, or H4 when `Declared` is the function's own type.
template <class Declared, class F>
bool define_function(const char* name, F f) {
  using D = std::remove_cv_t<std::remove_reference_t<Declared>>;
  if constexpr (!std::is_function<D>::value)
    static_assert(std::is_same<D, handle_of_t<F>>::value,
                  "castor: the callable of CASTOR_FUNCTION_DEF has another signature than its CASTOR_FUNCTION_DECL "
                  "(see Note [Typed handles], H3)");
  register_function(name, std::move(f));
  return true;
}

/// The older registrar (no handle), kept for code that names it.
struct FunctionRegistrar {
  template <class F>
  FunctionRegistrar(const char* name, F f) {
    register_function(name, std::move(f));
  }
};

}  // namespace castor::detail

#define CASTOR_DETAIL_CONCAT_(a, b) a##b
#define CASTOR_DETAIL_CONCAT(a, b) CASTOR_DETAIL_CONCAT_(a, b)

/// Registers `callable` under the name `name` (an identifier), callable from
/// every worker, and defines `name` as its typed handle (Note [Typed handles]):
///   CASTOR_FUNCTION(my_add, [](torch::Tensor a, torch::Tensor b) { return a + b; });
///   torch::Tensor c = w.rpc_sync("worker1", my_add, a, b);  // checked at compile time
/// Use at namespace scope; the callable may contain commas. For a named
/// function `f`, write CASTOR_FUNCTION_DEF(f, f) and pass `f` itself (H4).
#define CASTOR_FUNCTION(name, ...) \
  [[maybe_unused]] static const auto name = ::castor::detail::register_function(#name, __VA_ARGS__)

/// H3: declares the handle of a function registered in another file, in a
/// header: CASTOR_FUNCTION_DECL(my_add, torch::Tensor(torch::Tensor, torch::Tensor));
#define CASTOR_FUNCTION_DECL(name, ...) inline constexpr ::castor::FunctionHandle<__VA_ARGS__> name{#name}

/// H3 and H4: registers `callable` under `name`, which is a handle declared
/// with CASTOR_FUNCTION_DECL (the signatures must agree) or the named
/// function itself; defines nothing.
#define CASTOR_FUNCTION_DEF(name, ...)                                                     \
  [[maybe_unused]] static const bool CASTOR_DETAIL_CONCAT(castor_function_def_, name) = \
      ::castor::detail::define_function<decltype(name)>(#name, __VA_ARGS__)
