// S5 of Note [Shared parameters]. ATen takes a round as five passes over the
// model (the pushes' sum, its product by 1/n, then SGD's own add), each a
// dispatched op on 100 k floats that other cores have just written. One pass
// in blocks that stay in L1 reads each push and the parameters once: the
// server's round (2 trainers, MLP 784-128-10) took 62 us against 168-177
// with ATen's ops (castor run -n 3 parameter-server, the round timed on the
// server, two runs each). ATen 1.13 has no fused op for it.
#include "apps/parameter_server/round_step.hpp"

#include <algorithm>

namespace castor::apps::ps {

namespace {

constexpr int64_t kBlock = 1024;  // floats: a block's sum stays in L1

// One tensor: `grads` holds the pushes' data, `n` floats each.
void step_tensor(float* param, const std::vector<const float*>& grads, int64_t n, float neg_lr, float momentum,
                 const MomentumBuffer& mb) {
  const float inv = 1.0f / float(grads.size());
  float* buf = mb.buffer.defined() ? mb.buffer.data_ptr<float>() : nullptr;
  float sum[kBlock];
  for (int64_t at = 0; at < n; at += kBlock) {
    const int64_t len = std::min(kBlock, n - at);
    const float* g0 = grads[0] + at;
    for (int64_t j = 0; j < len; ++j) sum[j] = g0[j];
    for (size_t k = 1; k < grads.size(); ++k) {
      const float* g = grads[k] + at;
      for (int64_t j = 0; j < len; ++j) sum[j] += g[j];
    }
    float* p = param + at;
    if (!buf) {
      for (int64_t j = 0; j < len; ++j) p[j] += neg_lr * (sum[j] * inv);
    } else if (mb.first) {
      float* b = buf + at;
      for (int64_t j = 0; j < len; ++j) {
        b[j] = sum[j] * inv;
        p[j] += neg_lr * b[j];
      }
    } else {
      float* b = buf + at;
      for (int64_t j = 0; j < len; ++j) {
        b[j] = momentum * b[j] + sum[j] * inv;
        p[j] += neg_lr * b[j];
      }
    }
  }
}

bool plain_float(const at::Tensor& t, const at::Tensor& like) {
  return t.defined() && t.scalar_type() == at::kFloat && t.is_contiguous() && t.sizes().equals(like.sizes()) &&
         t.device().is_cpu();
}

}  // namespace

bool fits_round_step(const Params& params, const std::vector<const Params*>& pushes,
                     const std::vector<MomentumBuffer>& buffers) {
  if (pushes.empty() || (!buffers.empty() && buffers.size() != params.size())) return false;
  for (size_t i = 0; i < buffers.size(); ++i)
    if (!plain_float(buffers[i].buffer, params[i])) return false;
  for (const auto& p : params)
    if (!plain_float(p, p)) return false;
  for (const auto* push : pushes) {
    if (push->size() != params.size()) return false;
    for (size_t i = 0; i < params.size(); ++i)
      if (!plain_float((*push)[i], params[i])) return false;
  }
  return true;
}

void step_on_round_mean(const Params& params, const std::vector<const Params*>& pushes, double lr, double momentum,
                        const std::vector<MomentumBuffer>& buffers) {
  std::vector<const float*> grads(pushes.size());
  for (size_t i = 0; i < params.size(); ++i) {
    for (size_t k = 0; k < pushes.size(); ++k) grads[k] = (*pushes[k])[i].data_ptr<float>();
    step_tensor(params[i].data_ptr<float>(), grads, params[i].numel(), float(-lr), float(momentum),
                buffers.empty() ? MomentumBuffer{} : buffers[i]);
  }
}

}  // namespace castor::apps::ps
