// Spec validation and wire form.
#include "optimizer/optimizer_spec.hpp"

#include <stdexcept>

namespace castor::optim {
namespace {

std::optional<std::string> check(bool ok, const std::string& what) {
  if (ok) return std::nullopt;
  return what;
}

std::optional<std::string> first(std::initializer_list<std::optional<std::string>> checks) {
  for (const auto& c : checks)
    if (c) return c;
  return std::nullopt;
}

Value num(double x) { return Value(x); }
double num_at(const Value::List& xs, size_t i) {
  if (i >= xs.size()) throw std::invalid_argument("optimizer spec: missing field " + std::to_string(i));
  const auto& v = xs[i];
  if (v.is_double()) return v.to_double();
  if (v.is_int()) return double(v.to_int());
  if (v.is_bool()) return v.to_bool() ? 1 : 0;
  throw std::invalid_argument("optimizer spec: field " + std::to_string(i) + " is not a number");
}

}  // namespace

std::string name_of(const Spec& spec) {
  static const char* names[] = {"SGD", "Adam", "AdamW", "Adagrad", "RMSprop"};
  return names[spec.index()];
}

std::optional<std::string> invalid_reason(const Spec& spec) {
  auto name = name_of(spec);
  auto lr_ok = [&](double lr) { return check(lr >= 0, name + ": learning rate must be >= 0, got " + std::to_string(lr)); };
  if (auto* s = std::get_if<SGD>(&spec))
    return first({lr_ok(s->lr), check(s->momentum >= 0, "SGD: momentum must be >= 0"),
                  check(s->weight_decay >= 0, "SGD: weight_decay must be >= 0"),
                  check(!s->nesterov || (s->momentum > 0 && s->dampening == 0),
                        "SGD: Nesterov momentum requires a momentum and zero dampening")});
  auto adam_like = [&](double lr, double b1, double b2, double eps, double wd) {
    return first({lr_ok(lr), check(b1 >= 0 && b1 < 1, name + ": beta1 must be in [0, 1)"),
                  check(b2 >= 0 && b2 < 1, name + ": beta2 must be in [0, 1)"),
                  check(eps >= 0, name + ": eps must be >= 0"), check(wd >= 0, name + ": weight_decay must be >= 0")});
  };
  if (auto* s = std::get_if<Adam>(&spec)) return adam_like(s->lr, s->beta1, s->beta2, s->eps, s->weight_decay);
  if (auto* s = std::get_if<AdamW>(&spec)) return adam_like(s->lr, s->beta1, s->beta2, s->eps, s->weight_decay);
  if (auto* s = std::get_if<Adagrad>(&spec))
    return first({lr_ok(s->lr), check(s->lr_decay >= 0, "Adagrad: lr_decay must be >= 0"),
                  check(s->weight_decay >= 0, "Adagrad: weight_decay must be >= 0"),
                  check(s->initial_accumulator_value >= 0, "Adagrad: initial_accumulator_value must be >= 0"),
                  check(s->eps >= 0, "Adagrad: eps must be >= 0")});
  auto* s = std::get_if<RMSprop>(&spec);
  return first({lr_ok(s->lr), check(s->alpha >= 0, "RMSprop: alpha must be >= 0"),
                check(s->eps >= 0, "RMSprop: eps must be >= 0"),
                check(s->weight_decay >= 0, "RMSprop: weight_decay must be >= 0"),
                check(s->momentum >= 0, "RMSprop: momentum must be >= 0")});
}

Value to_value(const Spec& spec) {
  Value::List out{Value(name_of(spec))};
  std::visit(
      [&](const auto& s) {
        using S = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<S, SGD>)
          out.insert(out.end(), {num(s.lr), num(s.momentum), num(s.dampening), num(s.weight_decay), Value(s.nesterov)});
        else if constexpr (std::is_same_v<S, Adam> || std::is_same_v<S, AdamW>)
          out.insert(out.end(), {num(s.lr), num(s.beta1), num(s.beta2), num(s.eps), num(s.weight_decay), Value(s.amsgrad)});
        else if constexpr (std::is_same_v<S, Adagrad>)
          out.insert(out.end(), {num(s.lr), num(s.lr_decay), num(s.weight_decay), num(s.initial_accumulator_value), num(s.eps)});
        else
          out.insert(out.end(), {num(s.lr), num(s.alpha), num(s.eps), num(s.weight_decay), num(s.momentum), Value(s.centered)});
      },
      spec);
  return Value(std::move(out));
}

Spec spec_from_value(const Value& v) {
  if (!v.is_list() || v.to_list().empty() || !v.to_list()[0].is_string())
    throw std::invalid_argument("optimizer spec: expected [name, fields...]");
  const auto& xs = v.to_list();
  const auto& name = xs[0].to_string_ref();
  auto f = [&](size_t i) { return num_at(xs, i); };
  if (name == "SGD") return SGD{f(1), f(2), f(3), f(4), f(5) != 0};
  if (name == "Adam") return Adam{f(1), f(2), f(3), f(4), f(5), f(6) != 0};
  if (name == "AdamW") return AdamW{f(1), f(2), f(3), f(4), f(5), f(6) != 0};
  if (name == "Adagrad") return Adagrad{f(1), f(2), f(3), f(4), f(5)};
  if (name == "RMSprop") return RMSprop{f(1), f(2), f(3), f(4), f(5), f(6) != 0};
  throw std::invalid_argument("optimizer spec: unknown optimizer '" + name + "'");
}

}  // namespace castor::optim
