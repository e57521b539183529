// Shared tensors (Note [Shared tensors] in shared_segments.cpp): memory that
// workers on one host map, so that a tensor in it reaches them as a view
// instead of a copy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace castor::detail::bulk {

/// Where a tensor's bytes lie in a shared segment, as a same-host head
/// names it (SH3): `fd` is the segment's descriptor in the sending process
/// (-1: not shared, copy it), `id` the segment's name, `offset` the
/// tensor's first byte in it.
struct SharedRef {
  int64_t fd = -1;
  uint64_t id = 0;
  uint64_t offset = 0;
};

/// SH1: moves `t`'s storage into a new segment, in place (every view of
/// the storage follows); a tensor already in one is left as it is.
void move_to_shared_segment(const at::Tensor& t);

/// Whether `t`'s bytes lie in a segment of this process (made here or mapped).
bool in_shared_segment(const at::Tensor& t);

/// SH2: the segment of a contiguous tensor whose bytes lie in one, or a
/// SharedRef with fd -1.
SharedRef shared_ref_of(const at::Tensor& t);

/// SH4: a tensor of `sizes` and `dtype` over `bytes` at `ref` in process
/// `pid`'s segment, mapped here (once per segment while any view of it
/// lives); undefined, with `why`, when the segment cannot be mapped.
at::Tensor map_shared(int pid, const SharedRef& ref, const std::vector<int64_t>& sizes, at::ScalarType dtype,
                      uint64_t bytes, std::string& why);

/// SH4: stops keeping the segments mapped from process `pid` (its link
/// ended: a dead peer's memory is not held for its next message); views
/// that live keep theirs.
void forget_kept_segments_of(int pid);

/// Segments of this process (made or mapped) that some tensor still holds.
size_t shared_segments_alive();

}  // namespace castor::detail::bulk
