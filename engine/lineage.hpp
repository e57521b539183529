// SMART mode: the lineage of send functions and which sends take part in a
// backward pass (see Note [SMART mode]).
#pragma once

#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include <torch/csrc/autograd/edge.h>

#include "actors/api/worker_options.hpp"
#include "engine/send_recv_functions.hpp"

namespace castor::detail {

using SendMap = std::unordered_map<uint64_t, std::shared_ptr<SendRpcBackward>>;

/// The ids (autograd message ids, sorted) of the recv functions of context
/// `ctx` reachable from `edges` here, plus the lineage each of them received.
std::vector<uint64_t> lineage_of(ContextId ctx, const std::vector<torch::autograd::Edge>& edges);

struct Participation {
  std::vector<std::shared_ptr<SendRpcBackward>> sends;  // the sends this worker waits for
  std::vector<uint64_t> ids;  // SMART: every participating message id, passed on with gradients
};

/// FAST: every send. SMART: the root computes the participants from its
/// roots (`root_edges`); other workers get them with the first gradient.
Participation participating_sends(AutogradMode mode, ContextId ctx, const SendMap& sends,
                                  const std::vector<torch::autograd::Edge>& root_edges,
                                  const std::optional<std::vector<uint64_t>>& participants);

}  // namespace castor::detail
