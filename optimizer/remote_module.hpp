// RemoteModule<M>: a libtorch module built on another worker; forward()
// runs there (recorded by distributed autograd inside a context), and
// parameter_rrefs() gives RRefs to its parameters for a DistributedOptimizer.
// Register each module type once: CASTOR_REMOTE_MODULE(M, constructor args...).
#pragma once

#include <string>
#include <type_traits>
#include <vector>

#include <ATen/core/Tensor.h>

#include "actors/api/current_worker.hpp"
#include "rref/rref.hpp"

namespace torch::nn {
class Module;
}

namespace castor::detail {
/// Note [Checkpoint]: loads a torch::nn module's parameters, buffers and
/// submodules from `archive` (as Module::save wrote them), checking every
/// name and shape before it changes anything, then copies in place.
void load_module_checked(torch::serialize::InputArchive& archive, torch::nn::Module& module);
}  // namespace castor::detail

namespace castor::nn {

namespace detail {
template <class M, class = void>
struct is_holder : std::false_type {};
template <class M>
struct is_holder<M, std::void_t<decltype(std::declval<M&>().operator->())>> : std::true_type {};
template <class M, class = void>
struct has_archive_save : std::false_type {};
template <class M>
struct has_archive_save<
    M, std::void_t<decltype(std::declval<const M&>().save(std::declval<torch::serialize::OutputArchive&>())),
                   decltype(std::declval<M&>().load(std::declval<torch::serialize::InputArchive&>()))>>
    : std::true_type {};
}  // namespace detail

/// What lives on the owner: the module, constructed there.
template <class M>
class ModuleHost {
 public:
  template <class... Args>
  explicit ModuleHost(Args&&... args) : module_(std::forward<Args>(args)...) {}

  at::Tensor forward(at::Tensor x) {
    if constexpr (detail::is_holder<M>::value)
      return module_->forward(x);
    else
      return module_.forward(x);
  }

  /// RRefs owned here to the parameters themselves (an optimizer updates them in place).
  std::vector<RRef<at::Tensor>> parameter_rrefs() {
    std::vector<RRef<at::Tensor>> out;
    auto& w = current_worker();
    for (auto& p : parameters()) out.push_back(w.make_rref(p));
    return out;
  }

  std::vector<at::Tensor> parameters() {
    if constexpr (detail::is_holder<M>::value)
      return module_->parameters();
    else
      return module_.parameters();
  }

  M& module() { return module_; }

  /// Note [Checkpoint]: a torch::nn module saves itself (parameters,
  /// buffers, submodules); any other M, its parameters by position.
  void save(torch::serialize::OutputArchive& archive) const {
    if constexpr (detail::is_holder<M>::value)
      module_->save(archive);
    else if constexpr (detail::has_archive_save<M>::value)
      module_.save(archive);
    else
      castor::detail::save_tensors(archive, const_cast<ModuleHost*>(this)->parameters());
  }
  void load(torch::serialize::InputArchive& archive) {
    if constexpr (detail::is_holder<M>::value)
      castor::detail::load_module_checked(archive, *module_);
    else if constexpr (std::is_base_of<torch::nn::Module, M>::value)
      castor::detail::load_module_checked(archive, module_);
    else if constexpr (detail::has_archive_save<M>::value)
      module_.load(archive);
    else
      castor::detail::load_tensors(archive, parameters());
  }

 private:
  M module_;
};

template <class M>
class RemoteModule {
 public:
  /// Builds M(args...) on worker `on` (a name, a rank or a WorkerInfo).
  template <class... Args>
  RemoteModule(Worker& w, WorkerRef on, Args&&... args)
      : rref_(w.remote<ModuleHost<M>>(std::move(on), castor::detail::type_name_of<ModuleHost<M>>(),
                                      std::forward<Args>(args)...)) {}

  at::Tensor forward(const at::Tensor& x) const { return rref_.rpc_sync(&ModuleHost<M>::forward, x); }
  Future<at::Tensor> forward_async(const at::Tensor& x) const { return rref_.rpc_async(&ModuleHost<M>::forward, x); }
  std::vector<RRef<at::Tensor>> parameter_rrefs() const { return rref_.rpc_sync(&ModuleHost<M>::parameter_rrefs); }
  const RRef<ModuleHost<M>>& module_rref() const { return rref_; }
  /// The module's owner died (RRef::on_owner_failure).
  FailureHandlerId on_owner_failure(WorkerFailureHandler handler) const {
    return rref_.on_owner_failure(std::move(handler));
  }

 private:
  RRef<ModuleHost<M>> rref_;
};

}  // namespace castor::nn

/// Makes module type M usable with RemoteModule<M>, constructed from
/// `Args...`: CASTOR_REMOTE_MODULE(torch::nn::Linear, int64_t, int64_t);
#define CASTOR_REMOTE_MODULE(M, ...)                               \
  CASTOR_CLASS(castor::nn::ModuleHost<M>)                          \
      .constructor<__VA_ARGS__>()                                  \
      .method("forward", &castor::nn::ModuleHost<M>::forward)      \
      .method("parameter_rrefs", &castor::nn::ModuleHost<M>::parameter_rrefs)  \
      .checkpointed()
