// The backward loop: dependency counting, input buffers, node execution with
// hooks, gradient validation, AccumulateGrad captured into the context.
#include "engine/graph_task.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

#include <stdexcept>

namespace castor::detail {

using torch::autograd::AccumulateGrad;
using torch::autograd::Edge;
using torch::autograd::Node;

void GraphTaskCore::compute_dependencies(const std::vector<Edge>& root_edges,
                                         const std::vector<std::shared_ptr<SendRpcBackward>>& sends) {
  std::unordered_set<Node*> seen;
  std::vector<std::shared_ptr<Node>> stack;
  auto visit = [&](const std::shared_ptr<Node>& fn) {
    if (fn && seen.insert(fn.get()).second) {
      nodes_.push_back(fn);
      deps_.emplace(fn.get(), 0);
      stack.push_back(fn);
    }
  };
  for (const auto& e : root_edges) {
    if (!e.function) continue;
    visit(e.function);
    deps_[e.function.get()] += 1;  // satisfied by the root gradient
  }
  for (const auto& s : sends) {
    sends_[s->id().packed] = s;
    visit(s);
  }
  while (!stack.empty()) {
    auto fn = std::move(stack.back());
    stack.pop_back();
    for (const auto& next : fn->next_edges()) {
      if (!next.function) continue;
      visit(next.function);
      deps_[next.function.get()] += 1;
    }
  }
}

void GraphTaskCore::add_input(Node* fn, uint32_t input_nr, at::Tensor grad) {
  auto& buf = buffers_[fn];
  if (buf.size() < fn->num_inputs()) buf.resize(fn->num_inputs());
  if (input_nr >= buf.size()) buf.resize(input_nr + 1);
  auto& slot = buf[input_nr];
  if (!grad.defined()) return;
  slot = slot.defined() ? slot + grad : std::move(grad);  // gradients from several paths add up
}

void GraphTaskCore::add_root_grads(const std::vector<Edge>& root_edges, std::vector<at::Tensor> grads) {
  for (size_t i = 0; i < root_edges.size(); ++i) {
    const auto& e = root_edges[i];
    if (!e.function) continue;
    add_input(e.function.get(), e.input_nr, std::move(grads[i]));
    if (--deps_[e.function.get()] == 0) ready_.push_back(e.function.get());
  }
}

bool GraphTaskCore::add_send_grads(const std::shared_ptr<SendRpcBackward>& send, std::vector<at::Tensor> grads) {
  auto id = send->id().packed;
  if (!sends_.count(id) || !sends_fed_.insert(id).second) return false;
  for (uint32_t i = 0; i < grads.size(); ++i) add_input(send.get(), i, std::move(grads[i]));
  if (deps_[send.get()] == 0) ready_.push_back(send.get());
  return true;
}

std::vector<AutogradMessageId> GraphTaskCore::waiting_sends() const {
  std::vector<AutogradMessageId> out;
  for (const auto& [id, s] : sends_)
    if (!sends_fed_.count(id)) out.push_back(s->id());
  return out;
}

void GraphTaskCore::run(std::vector<OutgoingGrad>& out) {
  while (!ready_.empty()) {
    auto* fn = ready_.front();
    ready_.pop_front();
    std::vector<at::Tensor> inputs;
    auto it = buffers_.find(fn);
    if (it != buffers_.end()) {
      inputs = std::move(it->second);
      buffers_.erase(it);
    }
    inputs.resize(fn->num_inputs());
    ++executed_;
    execute(fn, std::move(inputs), out);
  }
}

void GraphTaskCore::execute(Node* fn, std::vector<at::Tensor> inputs, std::vector<OutgoingGrad>& out) {
  // Tensor hooks the user registered on non-leaf tensors run first.
  for (const auto& hook : fn->pre_hooks()) inputs = (*hook)(inputs);

  if (auto* acc = dynamic_cast<AccumulateGrad*>(fn)) {
    // Captured into the context instead of .grad (which stays untouched);
    // the leaf's own hooks run as they would in AccumulateGrad.
    if (!inputs.empty() && inputs[0].defined())
      captured_.emplace_back(acc->variable, AccumulateGrad::callHooks(acc->variable, inputs[0]));
    return;
  }
  if (auto* recv = dynamic_cast<RecvRpcBackward*>(fn)) {
    out.push_back(OutgoingGrad{recv->from(), recv->send_id(), std::move(inputs)});
    return;
  }
  std::vector<at::Tensor> outputs;
  try {
    if (!retain_graph_) fn->will_release_variables();
    auto inputs_for_hooks = fn->post_hooks().empty() ? std::vector<at::Tensor>{} : inputs;
    outputs = (*fn)(std::move(inputs));
    for (const auto& hook : fn->post_hooks()) outputs = (*hook)(outputs, inputs_for_hooks);
    if (!retain_graph_) fn->release_variables();
  } catch (const std::exception& e) {
    throw std::runtime_error("in " + fn->name() + ": " + e.what());
  }
  validate_outputs(fn, outputs);
  const auto& edges = fn->next_edges();
  for (size_t i = 0; i < edges.size(); ++i) {
    const auto& next = edges[i];
    if (!next.function) continue;
    add_input(next.function.get(), next.input_nr, i < outputs.size() ? std::move(outputs[i]) : at::Tensor());
    auto d = deps_.find(next.function.get());
    if (d != deps_.end() && --d->second == 0) ready_.push_back(next.function.get());
  }
}

// What libtorch's (hidden) validate_outputs does: a gradient takes the shape
// and dtype of the input it flows into; broadcasting is summed away.
void GraphTaskCore::validate_outputs(Node* fn, std::vector<at::Tensor>& outputs) {
  const auto& edges = fn->next_edges();
  if (outputs.size() != edges.size())
    throw std::runtime_error(fn->name() + " returned " + std::to_string(outputs.size()) + " gradients for " +
                             std::to_string(edges.size()) + " inputs");
  for (size_t i = 0; i < outputs.size(); ++i) {
    auto& grad = outputs[i];
    const auto& next = edges[i];
    if (!next.function || !grad.defined()) continue;
    const auto& meta = next.function->input_metadata(next.input_nr);
    if (!meta.is_same_shape(grad)) {
      if (!meta.is_expandable_to_shape(grad))
        throw std::runtime_error("in " + fn->name() + ": " + meta.incompatible_shape_error_message(i, grad).str());
      grad = meta.reduce_grad(grad);
    }
    auto want = c10::typeMetaToScalarType(meta.dtype());
    if (grad.scalar_type() != want) grad = grad.to(want);
  }
}

}  // namespace castor::detail
