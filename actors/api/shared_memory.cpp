#include "actors/api/shared_memory.hpp"

#include "actors/transport/bulk/shared_segments.hpp"

namespace castor {

const at::Tensor& share_memory(const at::Tensor& t) {
  detail::bulk::move_to_shared_segment(t);
  return t;
}

void share_memory(const std::vector<at::Tensor>& tensors) {
  for (const auto& t : tensors) detail::bulk::move_to_shared_segment(t);
}

bool is_shared(const at::Tensor& t) { return detail::bulk::in_shared_segment(t); }

}  // namespace castor
