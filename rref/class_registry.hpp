// CASTOR_CLASS: classes whose objects live on a worker behind an RRef
// (remote objects). Constructors and methods are registered with their
// argument types; calls are checked like functions' (actors/api/registry.hpp).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <typeindex>
#include <typeinfo>
#include <utility>
#include <vector>

#include "actors/api/registry.hpp"

namespace torch::serialize {
class OutputArchive;
class InputArchive;
}  // namespace torch::serialize

namespace castor::detail {

/// Note [Checkpoint] (optimizer/checkpoint.cpp): the methods that
/// `.checkpointed()` adds; Checkpoint calls them on the object's owner.
inline constexpr const char* kSaveStateMethod = "castor.save_state";
inline constexpr const char* kLoadStateMethod = "castor.load_state";

/// C1: writes what `fill` puts into an archive to `path` whole or not at
/// all (a temporary file, fsync, rename). Returns the file's size.
int64_t write_state_file(const std::string& path, const std::function<void(torch::serialize::OutputArchive&)>& fill);
/// Loads `path` into an archive and hands it to `read`.
void read_state_file(const std::string& path, const std::function<void(torch::serialize::InputArchive&)>& read);
/// Tensors by position ("0", "1", ...): the state of a module that is no
/// torch::nn::Module. Loading checks the count and shapes, then copies into
/// `into` in place (whoever holds them, an optimizer too, sees the values).
void save_tensors(torch::serialize::OutputArchive& archive, const std::vector<at::Tensor>& tensors);
void load_tensors(torch::serialize::InputArchive& archive, const std::vector<at::Tensor>& into);

using ObjectPtr = std::shared_ptr<void>;

struct MethodEntry {
  std::string name;
  std::vector<ParamInfo> params;
  std::string result;
  bool returns_future = false;
  // Note [Restartable values], RS7: running it twice is the same as once, so
  // a call that its owner's death cut off runs again on the next life.
  bool idempotent = false;
  // Note [Methods run on arrival]: short, never waits; runs on the thread
  // that hands the call to its object, not on the executor.
  bool on_arrival = false;
  // Runs the method on `object` (a T*); same rules as Invoker.
  std::function<void(void* object, std::vector<Value>&& args, Completion done)> invoke;
};

struct ConstructorEntry {
  std::vector<ParamInfo> params;
  std::function<ObjectPtr(std::vector<Value>&& args)> make;  // throws CallFailure
};

struct ClassEntry {
  std::string name;
  std::vector<ConstructorEntry> constructors;
  std::map<std::string, MethodEntry> methods;
  std::map<std::string, std::string> method_by_pointer;  // H6 of Note [Typed handles]: member_pointer_key -> name
  bool concurrent = false;  // opted in: calls on one object may overlap

  const MethodEntry* method(const std::string& m) const {
    auto it = methods.find(m);
    return it == methods.end() ? nullptr : &it->second;
  }
  /// Constructs from `args`, choosing the constructor by arity. Throws CallFailure.
  ObjectPtr construct(std::vector<Value>&& args) const;
  std::vector<std::string> signatures() const;
};

class ClassRegistry {
 public:
  static ClassRegistry& instance();
  ClassEntry& entry(const std::string& name, std::type_index type);
  const ClassEntry* find(const std::string& name) const;
  /// The registered name of a C++ class, or "" if it was not registered.
  std::string name_of(std::type_index type) const;
  /// H6 of Note [Typed handles]: the name a member pointer (its key) was
  /// registered under in class `type`; a LookupError naming the class if none.
  std::string method_name_of(const std::type_info& type, const std::string& key) const;

 private:
  std::map<std::string, ClassEntry> classes_;
  std::map<std::type_index, std::string> names_;
};

template <class T, class... A, size_t... I>
ObjectPtr construct_from(std::vector<Value>&& args, const std::string& cls, std::index_sequence<I...>) {
  std::tuple<std::decay_t<A>...> converted{convert_argument<A>(std::move(args[I]), I, cls)...};
  return std::make_shared<T>(std::move(std::get<I>(converted))...);
}

template <class T, class M, class R, class... A, size_t... I>
MethodEntry make_method_entry(std::string cls, std::string name, M m, type_list<A...>, std::index_sequence<I...>) {
  MethodEntry e;
  e.name = name;
  e.params = params_of(type_list<A...>{});
  e.returns_future = is_future<R>::value;
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
  auto what = "method '" + cls + "." + name + "'";
  auto params = e.params;
  e.invoke = [m, what, params](void* object, std::vector<Value>&& args, Completion done) {
    if (args.size() != sizeof...(A)) throw CallFailure{ErrorKind::Type, arity_message(what, params, args.size())};
    std::tuple<std::decay_t<A>...> converted{convert_argument<A>(std::move(args[I]), I, what)...};
    auto* self = static_cast<T*>(object);
    deliver_result<R>([&]() -> R { return (self->*m)(std::move(std::get<I>(converted))...); }, done);
  };
  return e;
}

/// A method of one std::string argument made from a callable on T& (the
/// state methods, which T does not declare under these names).
template <class T, class R, class F>
MethodEntry make_path_method_entry(const std::string& cls, const char* name, F f) {
  MethodEntry e;
  e.name = name;
  e.params = params_of(type_list<std::string>{});
  e.result = ValueTraits<R>::name();
  auto what = "method '" + cls + "." + name + "'";
  auto params = e.params;
  e.invoke = [f, what, params](void* object, std::vector<Value>&& args, Completion done) {
    if (args.size() != 1) throw CallFailure{ErrorKind::Type, arity_message(what, params, args.size())};
    auto path = convert_argument<std::string>(std::move(args[0]), 0, what);
    deliver_result<R>([&]() -> R { return f(*static_cast<T*>(object), path); }, done);
  };
  return e;
}

/// H5 of Note [Typed handles]: the registered name of class `type`; a
/// LookupError naming it if it was never registered.
std::string registered_class_or_throw(const std::type_info& type);

/// A member pointer's bytes and type: equal for the same member, whatever
/// the copy (H6 of Note [Typed handles]).
template <class M>
std::string member_pointer_key(M m) {
  static_assert(std::is_member_function_pointer<M>::value, "a pointer to a member function");
  return std::string(typeid(M).name()) + '#' + std::string(reinterpret_cast<const char*>(&m), sizeof(m));
}

/// What CASTOR_CLASS(T) starts: `.constructor<Args...>()`, `.method(name, &T::m)`,
/// `.idempotent(name)`, `.runs_on_arrival(name)`, `.concurrent()`; each
/// returns the builder, so the calls chain.
template <class T>
class ClassBuilder {
 public:
  static ClassBuilder& create(const char* name) {
    static ClassBuilder builder(name);  // one per class
    return builder;
  }

  template <class... Args>
  ClassBuilder& constructor() {
    ConstructorEntry c;
    c.params = params_of(type_list<Args...>{});
    auto cls = entry_->name;
    c.make = [cls](std::vector<Value>&& args) {
      return construct_from<T, Args...>(std::move(args), "constructor of class '" + cls + "'", std::index_sequence_for<Args...>{});
    };
    entry_->constructors.push_back(std::move(c));
    return *this;
  }

  template <class M>
  ClassBuilder& method(const char* name, M m) {
    static_assert(std::is_member_function_pointer<M>::value,
                  "CASTOR_CLASS(...).method(name, &Class::member) takes a pointer to a member function");
    using traits = function_traits<M>;
    using Args = typename traits::args;
    auto e = make_method_entry<T, M, typename traits::result>(entry_->name, name, m, Args{},
                                                              std::make_index_sequence<Args::size>{});
    if (!entry_->methods.emplace(name, std::move(e)).second)
      FunctionRegistry::instance().add_problem("method '" + entry_->name + "." + name + "' is registered twice");
    entry_->method_by_pointer.emplace(member_pointer_key(m), name);  // the first name wins for a pointer
    return *this;
  }

  /// Note [Checkpoint]: lets castor::Checkpoint save and restore objects of
  /// T, which has `void save(torch::serialize::OutputArchive&) const` and
  /// `void load(torch::serialize::InputArchive&)`. They run on the owner as
  /// method calls do: one at a time with the object's other calls, unless
  /// the class is concurrent (then T synchronizes them too).
  ClassBuilder& checkpointed() {
    auto add = [this](MethodEntry e) {
      auto name = e.name;
      if (!entry_->methods.emplace(name, std::move(e)).second)
        FunctionRegistry::instance().add_problem("class '" + entry_->name + "' is made checkpointed twice");
    };
    add(make_path_method_entry<T, int64_t>(entry_->name, kSaveStateMethod, [](T& self, const std::string& path) {
      return write_state_file(path, [&self](torch::serialize::OutputArchive& a) { std::as_const(self).save(a); });
    }));
    add(make_path_method_entry<T, bool>(entry_->name, kLoadStateMethod, [](T& self, const std::string& path) {
      read_state_file(path, [&self](torch::serialize::InputArchive& a) { self.load(a); });
      return true;
    }));
    return *this;
  }

  /// RS7 of Note [Restartable values]: method `name` (registered above) may
  /// run twice to the same effect. On an object made with castor::Restart,
  /// a call to it that the owner's death cut off, or that comes while the
  /// owner is dead, waits for the object to come back (within the call's
  /// timeout) and runs there instead of failing.
  ClassBuilder& idempotent(const char* name) {
    auto it = entry_->methods.find(name);
    if (it == entry_->methods.end())
      FunctionRegistry::instance().add_problem("class '" + entry_->name + "': idempotent(\"" + name +
                                               "\") names no method registered before it");
    else
      it->second.idempotent = true;
    return *this;
  }

  /// Note [Methods run on arrival] (rref/owner_rref_actor.cpp): method
  /// `name` (registered above) is short and never waits on a Future, so a
  /// call to it runs on the thread that hands it to the object (usually the
  /// one that read it from the link) instead of waking an executor thread.
  /// It still runs one at a time with the object's other calls; a wait
  /// inside it fails the call, naming the method.
  ClassBuilder& runs_on_arrival(const char* name) {
    auto it = entry_->methods.find(name);
    if (it == entry_->methods.end())
      FunctionRegistry::instance().add_problem("class '" + entry_->name + "': runs_on_arrival(\"" + name +
                                               "\") names no method registered before it");
    else
      it->second.on_arrival = true;
    return *this;
  }

  /// Lets calls on one object run at the same time (the class synchronizes itself).
  ClassBuilder& concurrent(bool yes = true) {
    entry_->concurrent = yes;
    return *this;
  }

 private:
  explicit ClassBuilder(const char* name) : entry_(&ClassRegistry::instance().entry(name, typeid(T))) {}
  ClassEntry* entry_;
};

}  // namespace castor::detail

/// Registers class `T` for remote objects:
///   CASTOR_CLASS(ParameterServer).constructor<int64_t>().method("get", &ParameterServer::get);
/// Use at namespace scope. Objects are held by shared_ptr: T need not be copyable or movable.
#define CASTOR_CLASS(T)                                                                        \
  [[maybe_unused]] static ::castor::detail::ClassBuilder<T>& CASTOR_DETAIL_CONCAT(castor_class_, \
                                                                                 __LINE__) =   \
      ::castor::detail::ClassBuilder<T>::create(#T)
