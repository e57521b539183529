// Lineage of send functions, and the participants of a SMART backward pass.
#include "engine/lineage.hpp"

#include <algorithm>
#include <unordered_set>

#include <torch/csrc/autograd/function.h>

namespace castor::detail {

// Note [SMART mode]
// ~~~~~~~~~~~~~~~~~
// FAST mode assumes that every send function of a context gets a gradient in
// every backward pass; a pass over part of the graph (an unused remote
// result, a backward from an intermediate tensor) then waits forever. SMART
// mode (the RPC RFC's, never built by PyTorch) knows which sends take part:
//
//  A1. Forward: a send function records its lineage: the ids of the recv
//      functions of the same context that are reachable here from the sent
//      tensors, plus the lineage each of those recv functions received with
//      its message. The message carries the lineage; the recv side keeps it.
//      So lineage(send) is every recv upstream of the sent tensors in the
//      whole distributed graph (recv and send of a pair share their id).
//  A2. Backward: the worker calling backward collects the recv functions
//      reachable from its roots and their lineages: that set P holds exactly
//      the message ids whose send will receive a gradient, because a
//      gradient reaching a tensor reaches everything upstream of it.
//  A3. P travels with every gradient of the pass (so it reaches each
//      participating worker with its first gradient, while the backward pass
//      is already running), and each worker counts dependencies only over its
//      sends in P; the others are never waited for. Gradients and completion
//      then flow as in FAST mode (Note [FAST mode]).
//  A4. Ids that cannot matter are dropped: recv functions of other contexts
//      (a tensor reused from an earlier iteration) are not followed, so a
//      long training loop, one context per step, does not grow the lineage.

std::vector<uint64_t> lineage_of(ContextId ctx, const std::vector<torch::autograd::Edge>& edges) {
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> stack;
  for (const auto& e : edges)
    if (e.function && seen.insert(e.function.get()).second) stack.push_back(e.function.get());
  std::vector<uint64_t> out;
  while (!stack.empty()) {
    auto* fn = stack.back();
    stack.pop_back();
    if (auto* recv = dynamic_cast<RecvRpcBackward*>(fn)) {
      if (recv->context() != ctx) continue;  // A4
      out.push_back(recv->send_id().packed);
      out.insert(out.end(), recv->lineage.begin(), recv->lineage.end());
      continue;
    }
    for (const auto& next : fn->next_edges())
      if (next.function && seen.insert(next.function.get()).second) stack.push_back(next.function.get());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Participation participating_sends(AutogradMode mode, ContextId ctx, const SendMap& sends,
                                  const std::vector<torch::autograd::Edge>& root_edges,
                                  const std::optional<std::vector<uint64_t>>& participants) {
  Participation out;
  if (mode == AutogradMode::fast) {
    for (const auto& [id, s] : sends) out.sends.push_back(s);  // every send is assumed to get a gradient
    return out;
  }
  out.ids = participants ? *participants : lineage_of(ctx, root_edges);  // A2 on the root, A3 elsewhere
  for (const auto& [id, s] : sends)
    if (std::binary_search(out.ids.begin(), out.ids.end(), id)) out.sends.push_back(s);
  return out;
}

}  // namespace castor::detail
