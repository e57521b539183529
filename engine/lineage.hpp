// Which send functions take part in a backward pass: all of them in FAST mode;
// in SMART mode only those that can receive a gradient (see Note [SMART mode]).
#pragma once

#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include <torch/csrc/autograd/edge.h>

#include "engine/send_recv_functions.hpp"

namespace castor::detail {

class AutogradRuntime;

using SendMap = std::unordered_map<uint64_t, std::shared_ptr<SendRpcBackward>>;

/// `participants`: the ids the root disseminated (SMART, non-root workers).
std::vector<std::shared_ptr<SendRpcBackward>> participating_sends(
    AutogradRuntime& ar, const SendMap& sends, const std::vector<torch::autograd::Edge>& root_edges,
    const std::optional<std::vector<uint64_t>>& participants);

}  // namespace castor::detail
