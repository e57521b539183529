// Memory for received tensors, kept for reuse (see the class comment).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

#include <ATen/ATen.h>

namespace castor::detail::bulk {

// Received tensors' memory, kept for reuse when they die. A fresh block of
// megabytes costs a page fault (and the kernel zeroing the page) every 4 KiB
// while recv() fills it: about a third of a 64 MiB echo on loopback. glibc
// returns such blocks to the kernel at once (they are above its largest mmap
// threshold), so castor keeps a few itself. Process-wide, because tensors
// outlive workers; bounded, so a burst of large messages does not pin memory.
class ReceiveBlocks {
 public:
  static constexpr size_t kMaxCached = size_t(512) << 20;

  static ReceiveBlocks& instance();

  /// A tensor of `sizes` and `dtype` over `bytes` of reused (or new) memory.
  at::Tensor empty(const std::vector<int64_t>& sizes, at::ScalarType dtype, size_t bytes);

 private:
  static void* allocate(size_t bytes);
  void* take(size_t bytes);
  void give(void* p, size_t bytes);
  std::mutex mtx_;
  std::multimap<size_t, void*> free_;
  size_t cached_ = 0;
};

}  // namespace castor::detail::bulk
