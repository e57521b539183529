// A remote module's state read back from a checkpoint (Note [Checkpoint],
// C4): libtorch's Module::load resizes tensors in place as it reads them, so
// a file of another shape would half-load; this reads everything first.
#include <stdexcept>
#include <utility>
#include <vector>

#include <ATen/core/grad_mode.h>
#include <torch/nn/module.h>
#include <torch/serialize/input-archive.h>

#include "optimizer/remote_module.hpp"

namespace castor::detail {
namespace {

using Plan = std::vector<std::pair<at::Tensor, at::Tensor>>;  // (the module's tensor, the file's)

void read_checked(torch::serialize::InputArchive& archive, torch::nn::Module& module, const std::string& prefix,
                  Plan& plan) {
  auto take = [&](const std::string& key, const at::Tensor& into, bool buffer) {
    at::Tensor read;
    if (!archive.try_read(key, read, buffer))
      throw std::invalid_argument("the checkpoint has no " + std::string(buffer ? "buffer" : "parameter") + " '" +
                                  prefix + key + "'");
    if (!read.sizes().equals(into.sizes()))
      throw std::invalid_argument("the checkpoint's '" + prefix + key + "' has shape " + c10::str(read.sizes()) +
                                  ", not " + c10::str(into.sizes()));
    plan.emplace_back(into, read);
  };
  for (const auto& p : module.named_parameters(/*recurse=*/false)) take(p.key(), p.value(), false);
  for (const auto& b : module.named_buffers(/*recurse=*/false)) take(b.key(), b.value(), true);
  for (const auto& child : module.named_children()) {
    torch::serialize::InputArchive nested;
    if (!archive.try_read(child.key(), nested))
      throw std::invalid_argument("the checkpoint has no submodule '" + prefix + child.key() + "'");
    read_checked(nested, *child.value(), prefix + child.key() + ".", plan);
  }
}

}  // namespace

void load_module_checked(torch::serialize::InputArchive& archive, torch::nn::Module& module) {
  Plan plan;
  read_checked(archive, module, "", plan);
  at::NoGradGuard no_grad;  // nothing is changed unless all of it fits
  for (auto& [into, read] : plan) into.copy_(read);
}

}  // namespace castor::detail
