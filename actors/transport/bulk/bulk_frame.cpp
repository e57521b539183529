// The bulk path's frames: placeholders for large tensors, and the head a
// writer sends before the tensors' bytes (B1 of Note [Bulk path]).
#include "actors/transport/bulk/bulk_frame.hpp"

#include "actors/transport/bulk/shared_segments.hpp"
#include "messages/autograd_proto.hpp"
#include "messages/call.hpp"
#include "messages/tensor_wire.hpp"

namespace castor::detail::bulk {

std::vector<Value*> values_in(CallRequest& m) {
  std::vector<Value*> out;
  for (auto& a : m.args) out.push_back(&a);
  return out;
}

std::vector<Value*> values_in(CallReply& m) { return {&m.result}; }

std::vector<Value*> values_in(BackwardGrad& m) {
  std::vector<Value*> out;
  for (auto& g : m.grads) out.push_back(&g);
  return out;
}

bool has_large(const Value& v, size_t threshold) {
  if (v.is_list()) {
    for (auto& x : v.to_list())
      if (has_large(x, threshold)) return true;
    return false;
  }
  return v.is_tensor() && (wire::wire_bytes(v.to_tensor()) >= threshold || in_shared_segment(v.to_tensor()));
}

// Depth-first, the order of B1 on both sides.
void extract(Value& v, size_t threshold, IdGenerator<TransferId>& ids, std::vector<at::Tensor>& out) {
  if (v.is_list()) {
    for (auto& x : v.to_list()) extract(x, threshold, ids, out);
    return;
  }
  if (!v.is_tensor()) return;
  const auto& t = v.to_tensor();
  if (wire::wire_bytes(t) < threshold && !in_shared_segment(t)) return;
  ExternalTensor ext;
  ext.transfer = ids.next();
  ext.dtype = int8_t(*wire::to_wire_dtype(t.scalar_type()));
  ext.sizes = t.sizes().vec();
  ext.requires_grad = t.requires_grad();
  // detach() is a dispatched op and an autograd view: only for a tensor that has a graph to cut.
  out.push_back(t.requires_grad() ? t.detach().contiguous() : t.contiguous());
  v = Value(std::move(ext));
}

void placeholders(Value& v, std::vector<Value*>& out) {
  if (v.is_list()) {
    for (auto& x : v.to_list()) placeholders(x, out);
  } else if (v.is_external()) {
    out.push_back(&v);
  }
}

void restore(const std::vector<Value*>& values, std::vector<at::Tensor>& tensors) {
  std::vector<Value*> slots;
  for (auto* v : values) placeholders(*v, slots);
  for (size_t i = 0; i < slots.size() && i < tensors.size(); ++i) {
    bool requires_grad = slots[i]->to_external().requires_grad;
    *slots[i] = Value(std::move(tensors[i]));
    if (requires_grad) slots[i]->to_tensor().set_requires_grad(true);
  }
}

Frame make_frame(uint8_t type, std::vector<char> envelope, std::vector<at::Tensor> tensors, CallId call) {
  Frame out;
  out.type = type;
  put(out.head, type);
  put(out.head, kBytesFollow);  // the writer may switch it to kAddresses (B7)
  put(out.head, uint64_t(envelope.size()));
  put(out.head, uint32_t(tensors.size()));
  for (auto& t : tensors) put(out.head, uint64_t(wire::wire_bytes(t)));
  out.head.insert(out.head.end(), envelope.begin(), envelope.end());
  out.tensors = std::move(tensors);
  out.call = call;
  return out;
}

namespace {
void add_records(Frame& out, uint8_t mode) {
  out.head[1] = char(mode);
  for (auto& t : out.tensors) {
    put(out.head, uint64_t(reinterpret_cast<uintptr_t>(t.data_ptr())));
    auto ref = shared_ref_of(t);  // SH3
    put(out.head, ref.fd);
    put(out.head, ref.id);
    put(out.head, ref.offset);
  }
  put(out.head, revocation_word_address());
  put(out.head, revocations_so_far());
}
}  // namespace

void add_addresses(Frame& out) {
  out.lease.take();  // before any of the head can leave
  add_records(out, kAddresses);
}

void add_views(Frame& out) { add_records(out, kViews); }

}  // namespace castor::detail::bulk
