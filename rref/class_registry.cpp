// Class registry storage, constructor choice and signatures.
#include "rref/class_registry.hpp"

#include "rref/rref_api.hpp"

namespace castor::detail {

ClassRegistry& ClassRegistry::instance() {
  static ClassRegistry registry;
  static bool hooked = [] {
    // The class signatures take part in init_rpc's check like functions'.
    add_signature_source([] {
      std::vector<std::string> out;
      for (const auto& [name, c] : ClassRegistry::instance().classes_) {
        auto s = c.signatures();
        out.insert(out.end(), s.begin(), s.end());
      }
      return out;
    });
    return true;
  }();
  (void)hooked;
  return registry;
}

ClassEntry& ClassRegistry::entry(const std::string& name, std::type_index type) {
  auto it = classes_.find(name);
  if (it == classes_.end()) {
    it = classes_.emplace(name, ClassEntry{}).first;
    it->second.name = name;
  }
  names_.emplace(type, name);
  return it->second;
}

const ClassEntry* ClassRegistry::find(const std::string& name) const {
  auto it = classes_.find(name);
  return it == classes_.end() ? nullptr : &it->second;
}

std::string ClassRegistry::name_of(std::type_index type) const {
  auto it = names_.find(type);
  return it == names_.end() ? std::string() : it->second;
}

std::string ClassRegistry::method_name_of(const std::type_info& type, const std::string& key) const {
  auto cls = name_of(type);
  auto it = cls.empty() ? classes_.end() : classes_.find(cls);
  if (it == classes_.end())
    throw LookupError(ErrorInfo{ErrorKind::Lookup, "",
                                "a method of class " + class_name_of(type) +
                                    " was called through a member pointer, but the class was never registered "
                                    "with CASTOR_CLASS"});
  auto m = it->second.method_by_pointer.find(key);
  if (m == it->second.method_by_pointer.end())
    throw LookupError(ErrorInfo{ErrorKind::Lookup, "",
                                "a method of class '" + cls +
                                    "' was called through a member pointer that was never registered: add "
                                    ".method(\"name\", &" + cls + "::member) to CASTOR_CLASS(" + cls + ")"});
  return m->second;
}

std::string registered_class_or_throw(const std::type_info& type) {
  auto name = ClassRegistry::instance().name_of(type);
  if (name.empty())
    throw LookupError(ErrorInfo{ErrorKind::Lookup, "",
                                std::string("remote<T>(worker, args...): class ") + class_name_of(type) +
                                    " was never registered with CASTOR_CLASS"});
  return name;
}

ObjectPtr ClassEntry::construct(std::vector<Value>&& args) const {
  const ConstructorEntry* best = nullptr;
  for (const auto& c : constructors)
    if (c.params.size() == args.size()) {
      best = &c;
      break;
    }
  if (!best) {
    std::string known;
    for (const auto& c : constructors) {
      known += known.empty() ? "(" : " or (";
      for (size_t i = 0; i < c.params.size(); ++i) known += (i ? ", " : "") + c.params[i].type;
      known += ")";
    }
    throw CallFailure{ErrorKind::Type, "class '" + name + "' has no constructor taking " +
                                           std::to_string(args.size()) + " argument" + (args.size() == 1 ? "" : "s") +
                                           (known.empty() ? " (none registered)" : "; it takes " + known)};
  }
  return best->make(std::move(args));
}

std::vector<std::string> ClassEntry::signatures() const {
  std::vector<std::string> out;
  for (const auto& c : constructors) {
    std::string s = "class " + name + "(";
    for (size_t i = 0; i < c.params.size(); ++i) s += (i ? ", " : "") + c.params[i].type;
    out.push_back(s + ")");
  }
  for (const auto& [m, e] : methods) {
    std::string s = name + "." + m + "(";
    for (size_t i = 0; i < e.params.size(); ++i) s += (i ? ", " : "") + e.params[i].type;
    out.push_back(s + ") -> " + e.result + (concurrent ? " [concurrent]" : ""));
  }
  return out;
}

}  // namespace castor::detail
