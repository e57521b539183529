// Chunking of large tensors and their reassembly.
#include "actors/calls/large_payloads.hpp"

#include <cstring>

#include <ATen/ATen.h>

#include "messages/tensor_wire.hpp"

namespace castor::detail {

void split_large_tensors(Value& v, size_t limit, IdGenerator<TransferId>& ids, std::vector<TensorChunk>& out) {
  if (v.is_list()) {
    for (auto& x : v.to_list()) split_large_tensors(x, limit, ids, out);
    return;
  }
  if (!v.is_tensor() || wire::wire_bytes(v.to_tensor()) <= limit) return;
  const auto& t = v.to_tensor();
  auto flat = t.detach().contiguous();
  auto total = int64_t(wire::wire_bytes(flat));
  // A byte view of the elements that keeps `flat` alive.
  auto bytes = at::from_blob(
      flat.data_ptr(), {total}, [keep = flat](void*) mutable { keep.reset(); }, at::TensorOptions().dtype(at::kByte));
  ExternalTensor ext;
  ext.transfer = ids.next();
  ext.dtype = int8_t(*wire::to_wire_dtype(flat.scalar_type()));
  ext.sizes = flat.sizes().vec();
  ext.requires_grad = t.requires_grad();
  for (int64_t off = 0; off < total; off += int64_t(limit)) {
    TensorChunk c;
    c.transfer = ext.transfer;
    c.dtype = ext.dtype;
    c.sizes = ext.sizes;
    c.offset = uint64_t(off);
    c.slice = bytes.narrow(0, off, std::min<int64_t>(int64_t(limit), total - off));
    out.push_back(std::move(c));
  }
  v = Value(std::move(ext));
}

std::string ChunkAssembler::add(TensorChunk&& c) {
  auto it = transfers_.find(c.transfer);
  if (it == transfers_.end()) {
    auto dtype = wire::from_wire_dtype(c.dtype);
    if (!dtype) return "chunk with an unknown dtype";
    Assembly a;
    a.target = at::empty(c.sizes, at::TensorOptions().dtype(*dtype));
    a.total = wire::wire_bytes(a.target);
    it = transfers_.emplace(c.transfer, std::move(a)).first;
  }
  auto& a = it->second;
  if (c.offset > a.total || c.bytes.size() > a.total - c.offset) {
    transfers_.erase(it);
    return "chunk beyond the end of its tensor";
  }
  std::memcpy(static_cast<char*>(a.target.data_ptr()) + c.offset, c.bytes.data(), c.bytes.size());
  a.received += c.bytes.size();
  return {};
}

std::string ChunkAssembler::resolve(Value& v) {
  if (v.is_list()) {
    for (auto& x : v.to_list())
      if (auto err = resolve(x); !err.empty()) return err;
    return {};
  }
  if (!v.is_external()) return {};
  auto ext = v.to_external();
  auto it = transfers_.find(ext.transfer);
  if (it == transfers_.end() || it->second.received != it->second.total)
    return "the chunks of " + to_string(ext.transfer) + " did not all arrive";
  auto t = std::move(it->second.target);
  transfers_.erase(it);
  if (ext.requires_grad) t.set_requires_grad(true);
  v = Value(std::move(t));
  return {};
}

void ChunkAssembler::drop_from(WorkerId worker) {
  for (auto it = transfers_.begin(); it != transfers_.end();)
    it = it->first.worker() == worker ? transfers_.erase(it) : std::next(it);
}

}  // namespace castor::detail
