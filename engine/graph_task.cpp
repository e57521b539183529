// The backward loop: dependency counting, input buffers, node execution with
// hooks, gradient validation, AccumulateGrad captured into the context.
#include "engine/graph_task.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <typeindex>
#include <typeinfo>
#include <unordered_set>

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

// Note [Light nodes]
// ~~~~~~~~~~~~~~~~~~
// A drain handed to an executor thread costs two thread hand-offs (to the
// thread and back to the graph task actor); a 1-hop pass has three drains,
// and on two cores each hand-off costs tens of microseconds, more than the
// nodes themselves. So the graph task actor runs light nodes itself, on the
// thread that runs the actor (a link's reader, backward()'s caller: Note
// [Actors run where their messages arrive]), and hands only the rest to the
// executor. A node is light when
//  L1 it is castor's RecvRpcBackward (it only moves gradients), or an
//     AccumulateGrad whose leaf has no hooks (captured into the context, no
//     arithmetic), or castor's SendRpcBackward on CPU gradients of at most
//     kLightElements elements (it passes them on, but they are then shaped
//     and summed into the next nodes' inputs); or
//  L2 it is one of libtorch's generated backward functions (never user code:
//     not a custom Function, which may block or take long), on the CPU, with
//     at most kLightElements gradient elements coming in (and going to
//     leaves, whose sizes are known), so that it takes microseconds; and
//  L3 no user hook is registered on it (hooks are user code, of any cost).
// User code therefore never runs on the actor's thread. libtorch 1.13 hides the
// shapes a node's outputs will have, so L2 cannot see a small gradient that
// makes a big one (an index into a large tensor, a product over a long inner
// dimension); such a node, once it ran longer than kLightBudget, makes its
// type heavy for the rest of the process (L4), so the actor's thread pays for it
// at most once per type.
namespace {
constexpr int64_t kLightElements = 4096;
constexpr auto kLightBudget = std::chrono::microseconds(200);

bool is_generated_backward(const Node& fn) {
  // libtorch's derivatives.yaml functions live in torch::autograd::generated.
  static const std::string prefix = "N5torch8autograd9generated";
  return std::string_view(typeid(fn).name()).substr(0, prefix.size()) == prefix;
}

// L4: node types that proved slow, for the whole process.
std::mutex heavy_mtx;
std::unordered_set<std::type_index> heavy_types;

bool proved_heavy(const Node& fn) {
  std::lock_guard<std::mutex> lock(heavy_mtx);
  return heavy_types.count(std::type_index(typeid(fn))) > 0;
}

void note_duration(const Node& fn, std::chrono::steady_clock::duration took) {
  if (took <= kLightBudget) return;
  std::lock_guard<std::mutex> lock(heavy_mtx);
  heavy_types.insert(std::type_index(typeid(fn)));
}

int64_t numel_of(const Edge& next) {
  if (auto* acc = dynamic_cast<AccumulateGrad*>(next.function.get())) return acc->variable.numel();
  return 0;  // unknown (see L4)
}
}  // namespace

bool GraphTaskCore::is_light(Node* fn) const {
  if (!fn->pre_hooks().empty() || !fn->post_hooks().empty()) return false;  // L3
  if (dynamic_cast<RecvRpcBackward*>(fn)) return true;  // L1
  if (auto* acc = dynamic_cast<AccumulateGrad*>(fn)) return torch::autograd::impl::hooks(acc->variable).empty();
  bool send = dynamic_cast<SendRpcBackward*>(fn) != nullptr;  // L1: by size, as L2
  if (!send && (!is_generated_backward(*fn) || proved_heavy(*fn))) return false;  // L2, L4
  int64_t elements = 0;
  if (auto it = buffers_.find(fn); it != buffers_.end())
    for (const auto& g : it->second)
      if (g.defined()) {
        if (!g.device().is_cpu()) return false;
        elements += g.numel();
      }
  for (const auto& next : fn->next_edges()) {
    if (!next.function) continue;
    if (!next.function->input_metadata(next.input_nr).device().is_cpu()) return false;
    elements += numel_of(next);
  }
  return elements <= kLightElements;
}

// Note [Drain order]
// ~~~~~~~~~~~~~~~~~~~
// A worker in the middle of a pipeline (the pipeline app's stage 2) gets one
// gradient per micro-batch, often several while it is busy, and each of its
// micro-batch chains ends in a RecvRpcBackward whose gradient the previous
// stage waits for. The stages overlap only if those gradients leave one by
// one, as soon as each chain is done:
//  D1 Ready nodes form a stack: a node's successors run before the nodes
//     that were ready before them, so a drain finishes one chain (depth
//     first) before it starts the next, instead of advancing every chain a
//     node at a time and ending them all together. Any order of ready nodes
//     is correct; dependencies are counted all the same.
//  D2 On an executor thread, gradients for peers leave before the next
//     heavy node (Note [Light nodes]) runs: the drain delivers them to its
//     graph task actor, which this thread then runs at once (Note [Actors
//     run where their messages arrive]) to send them, and goes on draining;
//     no hand-off. Before a light node they wait for the drain's end, as
//     before: light nodes take microseconds, and a drain that ends with its
//     part finished can still hand back its last word (C1 of Note [FAST
//     mode]) instead of a request that wants an answer.
// Measured on the pipeline app (2 stages, 4 micro-batches of 128 rows, 2
// cores): bench/README.md.
void GraphTaskCore::run(std::vector<OutgoingGrad>& out, bool light_only, const SendEarly& send_early) {
  while (!ready_.empty()) {
    auto* fn = ready_.back();
    if (light_only && !is_light(fn)) return;
    if (send_early && !out.empty() && !is_light(fn)) {  // D2
      send_early(std::move(out));
      out.clear();
    }
    auto started = light_only ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    ready_.pop_back();
    std::vector<at::Tensor> inputs;
    auto it = buffers_.find(fn);
    if (it != buffers_.end()) {
      inputs = std::move(it->second);
      buffers_.erase(it);
    }
    inputs.resize(fn->num_inputs());
    ++executed_;
    execute(fn, std::move(inputs), out);
    if (light_only) note_duration(*fn, std::chrono::steady_clock::now() - started);  // L4
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
