// The receive-block pool of the bulk path.
#include "actors/transport/bulk/receive_blocks.hpp"

#include <cstdlib>
#include <new>

namespace castor::detail::bulk {

ReceiveBlocks& ReceiveBlocks::instance() {
  static auto* blocks = new ReceiveBlocks;  // never destroyed: tensors may die at exit
  return *blocks;
}

at::Tensor ReceiveBlocks::empty(const std::vector<int64_t>& sizes, at::ScalarType dtype, size_t bytes) {
  auto rounded = (bytes + 4095) / 4096 * 4096;
  void* p = take(rounded);
  if (!p) p = std::aligned_alloc(4096, rounded);
  if (!p) throw std::bad_alloc();
  return at::from_blob(p, sizes, [this, rounded](void* q) { give(q, rounded); }, at::TensorOptions().dtype(dtype));
}

void* ReceiveBlocks::take(size_t bytes) {
  std::lock_guard<std::mutex> lock(mtx_);
  auto it = free_.find(bytes);
  if (it == free_.end()) return nullptr;
  void* p = it->second;
  free_.erase(it);
  cached_ -= bytes;
  return p;
}

void ReceiveBlocks::give(void* p, size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mtx_);
    if (cached_ + bytes <= kMaxCached) {
      free_.emplace(bytes, p);
      cached_ += bytes;
      return;
    }
  }
  std::free(p);
}

}  // namespace castor::detail::bulk
