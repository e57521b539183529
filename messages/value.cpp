// Value helpers: names, readable rendering, deep copies.
#include "messages/value.hpp"

#include "messages/rref_proto.hpp"

#include <sstream>

#include <ATen/ATen.h>

namespace castor {

const char* Value::kind_name(Kind k) {
  switch (k) {
    case Kind::None: return "None";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int64";
    case Kind::Double: return "double";
    case Kind::String: return "string";
    case Kind::Tensor: return "Tensor";
    case Kind::List: return "list";
    case Kind::RRef: return "RRef";
    case Kind::External: return "Tensor";
  }
  return "?";
}

namespace {
void render(std::ostream& out, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::None: out << "None"; break;
    case Value::Kind::Bool: out << (v.to_bool() ? "true" : "false"); break;
    case Value::Kind::Int: out << v.to_int(); break;
    case Value::Kind::Double: out << v.to_double(); break;
    case Value::Kind::String: out << '"' << v.to_string_ref() << '"'; break;
    case Value::Kind::Tensor: {
      const auto& t = v.to_tensor();
      if (!t.defined()) { out << "Tensor(undefined)"; break; }
      out << "Tensor" << t.sizes() << ' ' << c10::toString(t.scalar_type());
      break;
    }
    case Value::Kind::List: {
      out << '[';
      bool first = true;
      for (const auto& x : v.to_list()) {
        if (!first) out << ", ";
        first = false;
        render(out, x);
      }
      out << ']';
      break;
    }
    case Value::Kind::RRef: {
      const auto& r = v.to_rref();
      out << "RRef<" << r.type_name << ">(" << to_string(r.rref_id) << ", " << to_string(r.fork_id) << ')';
      break;
    }
    case Value::Kind::External: out << "Tensor(in transfer " << to_string(v.to_external().transfer) << ')'; break;
  }
}
}  // namespace

std::string Value::debug_string() const {
  std::ostringstream out;
  render(out, *this);
  return out.str();
}

Value Value::deep_copy() const {
  if (is_tensor()) {
    const auto& t = to_tensor();
    if (!t.defined()) return *this;
    auto c = t.detach().clone(at::MemoryFormat::Contiguous);
    if (t.requires_grad()) c.set_requires_grad(true);
    return Value(std::move(c));
  }
  if (is_list()) {
    List out;
    out.reserve(to_list().size());
    for (const auto& x : to_list()) out.push_back(x.deep_copy());
    return Value(std::move(out));
  }
  return *this;
}

const char* to_string(RRefOp op) {
  switch (op) {
    case RRefOp::fork_request: return "fork_request";
    case RRefOp::child_accept: return "child_accept";
    case RRefOp::user_delete: return "user_delete";
  }
  return "?";
}

Value Value::clone_with_graph() const {
  if (is_tensor()) {
    const auto& t = to_tensor();
    return t.defined() ? Value(t.clone()) : *this;
  }
  if (is_list()) {
    List out;
    out.reserve(to_list().size());
    for (const auto& x : to_list()) out.push_back(x.clone_with_graph());
    return Value(std::move(out));
  }
  return *this;
}

}  // namespace castor
