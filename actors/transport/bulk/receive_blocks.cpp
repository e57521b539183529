// The receive-block pool of the bulk path.
#include "actors/transport/bulk/receive_blocks.hpp"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace castor::detail::bulk {

ReceiveBlocks& ReceiveBlocks::instance() {
  static auto* blocks = new ReceiveBlocks;  // never destroyed: tensors may die at exit
  return *blocks;
}

at::Tensor ReceiveBlocks::empty(const std::vector<int64_t>& sizes, at::ScalarType dtype, size_t bytes) {
  // No block for no bytes: a cached block of size 0 would count nothing
  // against kMaxCached, so a frame of many empty tensors could pin memory.
  if (bytes == 0) return at::empty(sizes, at::TensorOptions().dtype(dtype));
  auto rounded = (bytes + 4095) / 4096 * 4096;
  void* p = take(rounded);
  if (!p) p = allocate(rounded);
  if (!p) throw std::bad_alloc();
  return at::from_blob(p, sizes, [this, rounded](void* q) { give(q, rounded); }, at::TensorOptions().dtype(dtype));
}

// A block of a huge page or more starts on a huge page's boundary and asks
// for huge pages (the tail past the last whole one stays in small pages, so
// nothing is rounded up): the kernel then walks and pins 512 times fewer
// pages when a peer's process_vm_readv copies from it (B7 of Note [Bulk
// path]: a same-host reply's bytes are read from here), and the copy into
// it misses the TLB less. Measured with 64 MiB echoes (castor-bench rpc's
// echo alone, the same build, three pairs): 12.9-14.6 ms against 15.7-22.9.
// Where transparent huge pages are off, the advice is ignored.
void* ReceiveBlocks::allocate(size_t bytes) {
  constexpr size_t kHugePage = size_t(2) << 20;
  if (bytes < kHugePage) return std::aligned_alloc(4096, bytes);
  void* p = nullptr;
  if (::posix_memalign(&p, kHugePage, bytes) != 0) return nullptr;
  ::madvise(p, bytes, MADV_HUGEPAGE);
  return p;
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
