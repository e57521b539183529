// SendRpcBackward and RecvRpcBackward: the autograd functions that stitch the
// local graphs of two workers together at every RPC that moves tensors
// requiring grad inside an autograd context, paired by an autograd message id.
#pragma once

#include <atomic>
#include <vector>

#include <torch/csrc/autograd/function.h>

#include "messages/ids.hpp"

namespace castor::detail {

/// On the sender: its next edges lead to the sent tensors' graph. In a
/// backward pass it is fed the gradients the receiver sends back.
class SendRpcBackward : public torch::autograd::Node {
 public:
  SendRpcBackward(AutogradMessageId id, WorkerId to) : id_(id), to_(to) {}
  std::string name() const override { return "castor::SendRpcBackward"; }
  AutogradMessageId id() const { return id_; }
  WorkerId to() const { return to_; }
  /// SMART mode: the recv functions (ids) this send's tensors depend on here.
  std::vector<uint64_t> lineage;

 protected:
  // The gradients arrive as this node's inputs; they pass on unchanged.
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override { return std::move(grads); }

 private:
  AutogradMessageId id_;
  WorkerId to_;
};

/// On the receiver: the received tensors are its outputs. In a backward pass
/// the engine sends its input gradients to the paired send function's worker
/// instead of applying it (see Note [FAST mode]).
class RecvRpcBackward : public torch::autograd::Node {
 public:
  RecvRpcBackward(AutogradMessageId send_id, WorkerId from, ContextId context)
      : send_id_(send_id), from_(from), context_(context) {}
  ContextId context() const { return context_; }
  std::string name() const override { return "castor::RecvRpcBackward"; }
  AutogradMessageId send_id() const { return send_id_; }
  WorkerId from() const { return from_; }
  /// SMART mode: the lineage its send carried.
  std::vector<uint64_t> lineage;

 protected:
  torch::autograd::variable_list apply(torch::autograd::variable_list&&) override { return {}; }

 private:
  AutogradMessageId send_id_;
  WorkerId from_;
  ContextId context_;
};

}  // namespace castor::detail
