// castor::share_memory: tensors that workers on one host see as one memory
// (Note [Shared tensors] in actors/transport/bulk/shared_segments.cpp).
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

namespace castor {

/// Moves `t`'s storage into memory that the workers of this host can map,
/// in place, as torch.multiprocessing's Tensor.share_memory_() does: every
/// view of the storage (an optimizer's parameter included) follows. Sent
/// in a call, reply or protocol message to a worker on this host, a shared
/// tensor arrives as a view of the same bytes, not a copy: what one side
/// writes, the other reads (castor orders nothing but the messages
/// themselves). Anywhere else (another host, the worker itself, a message
/// that falls back to CAF) it arrives as a copy, as any tensor does.
/// A shared tensor cannot grow (a resize_ that needs more bytes throws).
/// Returns `t`. Throws std::invalid_argument for a tensor not on the CPU or
/// without a storage (sparse).
const at::Tensor& share_memory(const at::Tensor& t);

/// The same for each tensor (a model's parameters).
void share_memory(const std::vector<at::Tensor>& tensors);

/// Whether `t`'s bytes lie in shared memory: shared here, or received as a
/// view of a same-host worker's shared tensor.
bool is_shared(const at::Tensor& t);

}  // namespace castor
