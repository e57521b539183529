// Optimizer specs (optimizer/optimizer_spec.hpp): libtorch's defaults, the
// wire form DistributedOptimizer sends to every owner and its decoding, and
// the validation that refuses a bad spec before any owner sees it.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <tuple>

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include "optimizer/optimizer_spec.hpp"

using namespace castor;
using namespace castor::optim;

namespace {

// Every field, so that a field lost on the way shows.
auto fields(const SGD& s) { return std::make_tuple(s.lr, s.momentum, s.dampening, s.weight_decay, s.nesterov); }
auto fields(const Adam& s) { return std::make_tuple(s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, s.amsgrad); }
auto fields(const AdamW& s) { return std::make_tuple(s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, s.amsgrad); }
auto fields(const Adagrad& s) {
  return std::make_tuple(s.lr, s.lr_decay, s.weight_decay, s.initial_accumulator_value, s.eps);
}
auto fields(const RMSprop& s) {
  return std::make_tuple(s.lr, s.alpha, s.eps, s.weight_decay, s.momentum, s.centered);
}

bool same(const Spec& a, const Spec& b) {
  if (a.index() != b.index()) return false;
  return std::visit([&](const auto& x) { return fields(x) == fields(std::get<std::decay_t<decltype(x)>>(b)); }, a);
}

std::string decode_error(const Value& v) {
  try {
    spec_from_value(v);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "NO EXCEPTION";
}

std::string reason(const Spec& s) { return invalid_reason(s).value_or("VALID"); }

}  // namespace

TEST_CASE("specs default to libtorch's option defaults") {
  torch::optim::AdamOptions adam;
  CHECK(fields(Adam{}) == std::make_tuple(adam.lr(), std::get<0>(adam.betas()), std::get<1>(adam.betas()), adam.eps(),
                                           adam.weight_decay(), adam.amsgrad()));
  torch::optim::AdamWOptions adamw;
  CHECK(fields(AdamW{}) == std::make_tuple(adamw.lr(), std::get<0>(adamw.betas()), std::get<1>(adamw.betas()),
                                            adamw.eps(), adamw.weight_decay(), adamw.amsgrad()));
  torch::optim::AdagradOptions adagrad;
  CHECK(fields(Adagrad{}) == std::make_tuple(adagrad.lr(), adagrad.lr_decay(), adagrad.weight_decay(),
                                              adagrad.initial_accumulator_value(), adagrad.eps()));
  torch::optim::RMSpropOptions rmsprop;
  CHECK(fields(RMSprop{}) == std::make_tuple(rmsprop.lr(), rmsprop.alpha(), rmsprop.eps(), rmsprop.weight_decay(),
                                              rmsprop.momentum(), rmsprop.centered()));
  torch::optim::SGDOptions sgd(0.5);  // SGD has no default learning rate, in libtorch or here
  CHECK(fields(SGD{0.5}) ==
        std::make_tuple(sgd.lr(), sgd.momentum(), sgd.dampening(), sgd.weight_decay(), sgd.nesterov()));
}

TEST_CASE("every spec, every field set, survives its wire form") {
  const Spec specs[] = {
      SGD{0.05, 0.9, 0.1, 0.01, false},
      SGD{0.05, 0.9, 0.0, 0.0, true},
      Adam{0.01, 0.8, 0.99, 1e-6, 0.01, true},
      AdamW{0.02, 0.7, 0.95, 1e-7, 0.03, true},
      Adagrad{0.1, 0.01, 0.001, 0.1, 1e-9},
      RMSprop{0.01, 0.9, 1e-7, 0.001, 0.5, true},
  };
  for (const auto& spec : specs) {
    CAPTURE(name_of(spec));
    CHECK(same(spec_from_value(to_value(spec)), spec));
  }
}

// Owners decode the list field by field, in this order: it is a wire format.
TEST_CASE("the wire form is [name, fields in declaration order]") {
  auto v = to_value(SGD{0.1, 0.9, 0.25, 1e-4, true});
  REQUIRE(v.is_list());
  const auto& xs = v.to_list();
  REQUIRE(xs.size() == 6);
  CHECK(xs[0].to_string_ref() == "SGD");
  CHECK(xs[1].to_double() == 0.1);
  CHECK(xs[2].to_double() == 0.9);
  CHECK(xs[3].to_double() == 0.25);
  CHECK(xs[4].to_double() == 1e-4);
  CHECK(xs[5].to_bool() == true);
  CHECK(to_value(Adam{}).to_list().size() == 7);
  CHECK(to_value(AdamW{}).to_list()[0].to_string_ref() == "AdamW");  // not decoded as Adam
  CHECK(to_value(Adagrad{}).to_list().size() == 6);
  CHECK(to_value(RMSprop{}).to_list().size() == 7);
  CHECK(name_of(Adagrad{}) == "Adagrad");
  CHECK(name_of(RMSprop{}) == "RMSprop");
}

TEST_CASE("decoding takes integers and booleans where a number is expected, and numbers as flags") {
  auto s = spec_from_value(Value(Value::List{Value("SGD"), Value(int64_t(2)), Value(true), Value(0.0), Value(0.0),
                                             Value(int64_t(1))}));
  REQUIRE(std::holds_alternative<SGD>(s));
  CHECK(same(s, SGD{2.0, 1.0, 0.0, 0.0, true}));
  auto a = spec_from_value(
      Value(Value::List{Value("Adam"), Value(0.5), Value(0.9), Value(0.99), Value(1e-8), Value(0.0), Value(0.0)}));
  CHECK(same(a, Adam{0.5, 0.9, 0.99, 1e-8, 0.0, false}));
}

TEST_CASE("a malformed spec is refused naming what is wrong") {
  CHECK(decode_error(Value(0.1)) == "optimizer spec: expected [name, fields...]");
  CHECK(decode_error(Value(Value::List{})) == "optimizer spec: expected [name, fields...]");
  CHECK(decode_error(Value(Value::List{Value(0.1), Value("SGD")})) == "optimizer spec: expected [name, fields...]");
  CHECK(decode_error(Value(Value::List{Value("Adadelta"), Value(0.1)})) ==
        "optimizer spec: unknown optimizer 'Adadelta'");
  // A field missing at the end, and one that is not a number.
  CHECK(decode_error(Value(Value::List{Value("SGD"), Value(0.1), Value(0.9), Value(0.0), Value(0.0)})) ==
        "optimizer spec: missing field 5");
  CHECK(decode_error(Value(Value::List{Value("RMSprop"), Value(0.1), Value("0.9"), Value(0.0), Value(0.0), Value(0.0),
                                       Value(false)})) == "optimizer spec: field 2 is not a number");
}

TEST_CASE("valid specs pass validation, the edges of each range included") {
  const Spec specs[] = {SGD{0.0},      SGD{0.1, 0.9, 0.0, 0.0, true}, Adam{},    Adam{0.0, 0.0, 0.0, 0.0},
                        AdamW{},       Adagrad{},                      RMSprop{}, RMSprop{0.0, 0.0, 0.0, 0.0, 0.0, true}};
  for (const auto& spec : specs) {
    CAPTURE(name_of(spec));
    CHECK(reason(spec) == "VALID");
  }
}

TEST_CASE("each invalid setting is refused naming the optimizer and the rule") {
  CHECK(reason(SGD{-1.0}) == "SGD: learning rate must be >= 0, got -1.000000");
  CHECK(reason(SGD{0.1, -0.5}) == "SGD: momentum must be >= 0");
  CHECK(reason(SGD{0.1, 0, 0, -1}) == "SGD: weight_decay must be >= 0");
  CHECK(reason(SGD{0.1, 0, 0, 0, true}) == "SGD: Nesterov momentum requires a momentum and zero dampening");
  CHECK(reason(SGD{0.1, 0.9, 0.1, 0, true}) == "SGD: Nesterov momentum requires a momentum and zero dampening");
  CHECK(reason(SGD{-1.0, -0.5}) == "SGD: learning rate must be >= 0, got -1.000000");  // the first rule broken

  CHECK(reason(Adam{-0.1}) == "Adam: learning rate must be >= 0, got -0.100000");
  CHECK(reason(Adam{0.1, 1.0}) == "Adam: beta1 must be in [0, 1)");
  CHECK(reason(Adam{0.1, -0.1}) == "Adam: beta1 must be in [0, 1)");
  CHECK(reason(Adam{0.1, 0.9, 1.0}) == "Adam: beta2 must be in [0, 1)");
  CHECK(reason(Adam{0.1, 0.9, 0.999, -1e-8}) == "Adam: eps must be >= 0");
  CHECK(reason(Adam{0.1, 0.9, 0.999, 1e-8, -0.1}) == "Adam: weight_decay must be >= 0");
  CHECK(reason(AdamW{0.1, 0.9, 1.5}) == "AdamW: beta2 must be in [0, 1)");
  CHECK(reason(AdamW{0.1, 0.9, 0.999, 1e-8, -0.1}) == "AdamW: weight_decay must be >= 0");

  CHECK(reason(Adagrad{-1.0}) == "Adagrad: learning rate must be >= 0, got -1.000000");
  CHECK(reason(Adagrad{0.1, -0.1}) == "Adagrad: lr_decay must be >= 0");
  CHECK(reason(Adagrad{0.1, 0, -0.1}) == "Adagrad: weight_decay must be >= 0");
  CHECK(reason(Adagrad{0.1, 0, 0, -0.1}) == "Adagrad: initial_accumulator_value must be >= 0");
  CHECK(reason(Adagrad{0.1, 0, 0, 0, -1e-10}) == "Adagrad: eps must be >= 0");

  CHECK(reason(RMSprop{-1.0}) == "RMSprop: learning rate must be >= 0, got -1.000000");
  CHECK(reason(RMSprop{0.1, -0.99}) == "RMSprop: alpha must be >= 0");
  CHECK(reason(RMSprop{0.1, 0.99, -1e-8}) == "RMSprop: eps must be >= 0");
  CHECK(reason(RMSprop{0.1, 0.99, 1e-8, -0.1}) == "RMSprop: weight_decay must be >= 0");
  CHECK(reason(RMSprop{0.1, 0.99, 1e-8, 0, -0.5}) == "RMSprop: momentum must be >= 0");
}
