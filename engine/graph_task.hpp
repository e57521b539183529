// GraphTaskCore: one worker's part of one backward pass, as plain data and a
// single-threaded loop. Its graph task actor hands it to one executor thread
// at a time (see Note [FAST mode]); nothing here is shared.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/function.h>

#include "engine/send_recv_functions.hpp"

namespace castor::detail {

/// A gradient to send to another worker: the inputs of a RecvRpcBackward.
struct OutgoingGrad {
  WorkerId to = -1;
  AutogradMessageId send;  // the paired send function there
  std::vector<at::Tensor> grads;
};

class GraphTaskCore {
 public:
  explicit GraphTaskCore(bool retain_graph) : retain_graph_(retain_graph) {}

  /// Counts dependencies over everything reachable from `root_edges` (the
  /// losses' gradient edges) and from `sends` (the send functions that will
  /// receive a gradient in this pass).
  void compute_dependencies(const std::vector<torch::autograd::Edge>& root_edges,
                            const std::vector<std::shared_ptr<SendRpcBackward>>& sends);

  /// Feeds the losses' initial gradients (the root worker only).
  void add_root_grads(const std::vector<torch::autograd::Edge>& root_edges, std::vector<at::Tensor> grads);

  /// A gradient arrived for one of this worker's send functions. Returns
  /// false if that send is not part of this pass.
  bool add_send_grads(const std::shared_ptr<SendRpcBackward>& send, std::vector<at::Tensor> grads);

  /// Called with the gradients for other workers gathered so far, before a
  /// heavy node runs (D2 of Note [Drain order]).
  using SendEarly = std::function<void(std::vector<OutgoingGrad>&&)>;

  /// Executes ready nodes until none is left; gradients for other workers go
  /// to `out`, or to `send_early` when one is given and a heavy node comes
  /// next. Throws what a node throws (with the node's name prefixed). With
  /// `light_only`, stops before the first node that is not light.
  void run(std::vector<OutgoingGrad>& out, bool light_only = false, const SendEarly& send_early = {});

  bool has_ready() const { return !ready_.empty(); }
  /// The next ready node is light: castor's own, or libtorch's on small
  /// tensors without user hooks (Note [Light nodes]).
  bool next_is_light() const { return !ready_.empty() && is_light(ready_.back()); }
  /// Every node of the pass ran.
  bool finished() const { return executed_ == nodes_.size(); }
  /// The send functions of this pass still waiting for their gradient.
  std::vector<AutogradMessageId> waiting_sends() const;
  size_t num_nodes() const { return nodes_.size(); }
  /// The gradients AccumulateGrad would have written, (leaf, gradient), since
  /// the last call: they go to the context, not to .grad.
  std::vector<std::pair<at::Tensor, at::Tensor>> take_captured() { return std::move(captured_); }

 private:
  void add_input(torch::autograd::Node* fn, uint32_t input_nr, at::Tensor grad);
  void execute(torch::autograd::Node* fn, std::vector<at::Tensor> inputs, std::vector<OutgoingGrad>& out);
  void validate_outputs(torch::autograd::Node* fn, std::vector<at::Tensor>& outputs);
  bool is_light(torch::autograd::Node* fn) const;

  bool retain_graph_;
  std::vector<std::pair<at::Tensor, at::Tensor>> captured_;
  // The pass's nodes (kept alive while it runs), their unmet dependencies and
  // the gradients gathered for their inputs (summed as they arrive).
  std::vector<std::shared_ptr<torch::autograd::Node>> nodes_;
  std::unordered_map<torch::autograd::Node*, int> deps_;
  std::unordered_map<torch::autograd::Node*, std::vector<at::Tensor>> buffers_;
  std::unordered_map<uint64_t, std::shared_ptr<SendRpcBackward>> sends_;  // by message id
  std::unordered_set<uint64_t> sends_fed_;
  std::vector<torch::autograd::Node*> ready_;  // a stack: the newest ready node runs first (D1)
  size_t executed_ = 0;
};

}  // namespace castor::detail
