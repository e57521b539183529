// Function registry storage and the texts of its errors.
#include "actors/api/registry.hpp"

#include <algorithm>
#include <mutex>

namespace castor::detail {

std::string FunctionEntry::signature() const {
  std::string s = name + "(";
  for (size_t i = 0; i < params.size(); ++i) s += (i ? ", " : "") + params[i].type;
  return s + ") -> " + result;
}

FunctionRegistry& FunctionRegistry::instance() {
  static FunctionRegistry registry;  // function-local: safe at static initialisation
  return registry;
}

void FunctionRegistry::add(FunctionEntry e) {
  auto name = e.name;
  auto [it, added] = entries_.emplace(name, std::move(e));
  if (!added)
    problems_.push_back("function '" + name + "' is registered twice (" + it->second.signature() + ")");
}

const FunctionEntry* FunctionRegistry::find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

std::string FunctionRegistry::name_of_address(void (*address)()) const {
  auto it = by_address_.find(address);
  return it == by_address_.end() ? std::string() : it->second;
}

// H4 of Note [Typed handles]: a named function's registration, by address.
std::string registered_name_or_throw(void (*address)()) {
  auto name = FunctionRegistry::instance().name_of_address(address);
  if (name.empty())
    throw LookupError(ErrorInfo{ErrorKind::Lookup, "",
                                "a function passed as a handle was never registered: add CASTOR_FUNCTION_DEF(f, f) "
                                "beside its definition (Note [Typed handles], H4)"});
  return name;
}

std::vector<std::string> FunctionRegistry::signatures() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, e] : entries_) out.push_back(e.signature());
  std::sort(out.begin(), out.end());
  return out;
}

namespace {
std::vector<std::function<std::vector<std::string>()>>& signature_sources() {
  static std::vector<std::function<std::vector<std::string>()>> sources;
  return sources;
}
}  // namespace

void add_signature_source(std::function<std::vector<std::string>()> source) {
  signature_sources().push_back(std::move(source));
}

std::vector<std::string> all_signatures() {
  auto out = FunctionRegistry::instance().signatures();
  for (const auto& source : signature_sources()) {
    auto more = source();
    out.insert(out.end(), more.begin(), more.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string arity_message(const std::string& what, const std::vector<ParamInfo>& params, size_t given) {
  std::string types;
  for (size_t i = 0; i < params.size(); ++i) types += (i ? ", " : "") + params[i].type;
  return what + " takes " + std::to_string(params.size()) + " argument" + (params.size() == 1 ? "" : "s") +
         " (" + types + "), got " + std::to_string(given);
}

}  // namespace castor::detail
