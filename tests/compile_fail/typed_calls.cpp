// Calls the typed API gets wrong on purpose: each CASTOR_CASE must fail to
// compile with the diagnostic its `expect:` line names (tests/compile_fail/
// run.sh checks both). Note [Typed handles] in actors/api/function_handle.hpp.
#include <string>

#include <ATen/ATen.h>

#include "actors/api/worker.hpp"
#include "rref/class_registry.hpp"
#include "rref/rref.hpp"

namespace user {
struct Counter {
  explicit Counter(int64_t start) : n(start) {}
  int64_t add(int64_t k) { return n += k; }
  int64_t n;
};
struct Other {
  int64_t add(int64_t k) { return k; }
};
}  // namespace user

CASTOR_CLASS(user::Counter).constructor<int64_t>().method("add", &user::Counter::add);
CASTOR_FUNCTION(t_add, [](at::Tensor a, at::Tensor b) { return a + b; });
CASTOR_FUNCTION_DECL(t_scale, at::Tensor(at::Tensor, double));

// Every case compiles these (case 0 is these alone): the string form's
// passing rules hold for typed calls (H2): an RRef<T> where a T is taken,
// and a T where an RRef<T> is taken.
CASTOR_FUNCTION(t_first, [](castor::RRef<at::Tensor> r) { return r.to_here(); });
at::Tensor an_rref_for_a_tensor(castor::Worker& w, castor::RRef<at::Tensor> r, at::Tensor a) {
  return w.rpc_sync("worker1", t_add, r, a);
}
at::Tensor a_tensor_for_an_rref(castor::Worker& w, at::Tensor a) { return w.rpc_sync(1, t_first, a); }
CASTOR_FUNCTION(t_half, [](double x) { return x / 2; });
double an_int_rref_for_a_double(castor::Worker& w, castor::RRef<int64_t> r) { return w.rpc_sync(1, t_half, r); }
// What the callee reads back from an RRef's value fits too: optionals (std
// and c10) of a fitting type, a Value, a pair for a tuple.
CASTOR_FUNCTION(t_maybe, [](c10::optional<at::Tensor> t) { return t.has_value(); });
CASTOR_FUNCTION(t_maybe_number, [](std::optional<double> x) { return x.value_or(0.0); });
CASTOR_FUNCTION(t_anything, [](castor::Value v) { return std::string(v.type_name()); });
CASTOR_FUNCTION(t_both, [](std::tuple<int64_t, double> p) { return std::get<0>(p) + std::get<1>(p); });
void rrefs_read_back(castor::Worker& w, castor::RRef<at::Tensor> t, castor::RRef<std::optional<int>> i,
                     castor::RRef<int64_t> n, castor::RRef<std::pair<int64_t, double>> p) {
  w.rpc_sync(1, t_maybe, t);
  w.rpc_sync(1, t_maybe_number, i);
  w.rpc_sync(1, t_maybe_number, n);
  w.rpc_sync(1, t_anything, t);
  w.rpc_sync(1, t_both, p);
}
// castor::Restart closes a typed remote(), before or after a Timeout.
castor::RRef<at::Tensor> a_restartable_value(castor::Worker& w, at::Tensor a, at::Tensor b) {
  return w.remote(1, t_add, a, b, castor::Restart{2}, castor::Timeout{});
}
castor::RRef<user::Counter> a_restartable_object(castor::Worker& w) {
  return w.remote<user::Counter>(1, int64_t(3), castor::Timeout{}, castor::Restart{1});
}

#if CASTOR_CASE == 1
// expect: castor: this call gives a different number of arguments than the function or method takes
at::Tensor one_argument_short(castor::Worker& w, at::Tensor a) { return w.rpc_sync("worker1", t_add, a); }
#elif CASTOR_CASE == 2
// expect: castor: an argument of this call does not convert to the type of its parameter
at::Tensor a_string_for_a_tensor(castor::Worker& w, at::Tensor a) {
  return w.rpc_sync("worker1", t_add, a, std::string("x"));
}
#elif CASTOR_CASE == 3
// expect: could not convert
castor::Future<int64_t> the_wrong_result(castor::Worker& w, at::Tensor a) { return w.rpc_async(1, t_add, a, a); }
#elif CASTOR_CASE == 4
// expect: castor: the callable of CASTOR_FUNCTION_DEF has another signature than its CASTOR_FUNCTION_DECL
CASTOR_FUNCTION_DEF(t_scale, [](at::Tensor x, int64_t k) { return x * k; });
#elif CASTOR_CASE == 5
// expect: castor: this member pointer is a method of another class than the RRef's
int64_t another_class(castor::RRef<user::Counter> c) { return c.rpc_sync(&user::Other::add, 1); }
#elif CASTOR_CASE == 6
// expect: castor: an argument of this call does not convert to the type of its parameter
int64_t a_method_argument(castor::RRef<user::Counter> c) { return c.rpc_sync(&user::Counter::add, "five"); }
#elif CASTOR_CASE == 7
// expect: castor: remote<T>(worker, args...) constructs T, but T has no constructor taking these arguments
castor::RRef<user::Counter> no_such_constructor(castor::Worker& w) { return w.remote<user::Counter>(1, 1.5, 2.5); }
#elif CASTOR_CASE == 8
// expect: castor: an argument of this call does not convert to the type of its parameter
// (C++ converts a double to an int64_t, but the callee reads an RRef<double>'s value back as a double only)
int64_t a_double_rref_for_an_integer(castor::RRef<user::Counter> c, castor::RRef<double> k) {
  return c.rpc_sync(&user::Counter::add, k);
}
#elif CASTOR_CASE == 9
// expect: castor::Restart is an option of remote(), whose value stays on its owner
at::Tensor a_call_cannot_restart(castor::Worker& w, at::Tensor a) { return w.rpc_sync(1, t_add, a, a, castor::Restart{1}); }
#endif

int main() { return 0; }
