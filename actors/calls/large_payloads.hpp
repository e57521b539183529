// Tensors above the BASP frame limit: split into TensorChunks on the sending
// side, assembled and substituted back on the receiving side.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "messages/chunk.hpp"
#include "messages/value.hpp"

namespace castor::detail {

/// Replaces every tensor in `v` whose elements exceed `limit` bytes by an
/// ExternalTensor and appends its chunks (at most `limit` bytes each, no
/// copy: they view the tensor) to `out`.
void split_large_tensors(Value& v, size_t limit, IdGenerator<TransferId>& ids, std::vector<TensorChunk>& out);

/// Collects chunks until the message that refers to them arrives. Lives in
/// the worker actor's state.
class ChunkAssembler {
 public:
  /// Copies a chunk into its tensor (allocated on the first chunk). Returns
  /// an error text for a chunk that does not fit its transfer.
  std::string add(TensorChunk&& chunk);

  /// Substitutes every ExternalTensor in `v` with its assembled tensor.
  /// Returns an error text if a transfer is unknown or incomplete.
  std::string resolve(Value& v);

  /// Drops the partial transfers a dead worker started.
  void drop_from(WorkerId worker);

  size_t pending() const { return transfers_.size(); }

 private:
  struct Assembly {
    at::Tensor target;
    uint64_t total = 0;
    uint64_t received = 0;
  };
  std::unordered_map<TransferId, Assembly> transfers_;
};

}  // namespace castor::detail
