// OwnerIndex (see owner_index.hpp).
#include "rref/owner_index.hpp"

#include <chrono>
#include <string>

namespace castor::detail {
namespace {

// "Tensor[float32 2x3]", a class name, a scalar's kind, "pending" or "error".
std::string describe_held(const Holder& h, int64_t& bytes) {
  bytes = 0;
  if (!h.is_set()) return "pending";
  if (h.error()) return "error";
  if (h.holds_object()) return h.cls() ? h.cls()->name : "object";
  const Value& v = h.value();
  if (v.is_tensor()) {
    const auto& t = v.to_tensor();
    bytes = int64_t(t.nbytes());
    std::string shape;
    for (auto d : t.sizes()) shape += (shape.empty() ? "" : "x") + std::to_string(d);
    return std::string("Tensor[") + c10::toString(t.scalar_type()) + " " + (shape.empty() ? "scalar" : shape) + "]";
  }
  if (v.is_list()) return "List[" + std::to_string(v.to_list().size()) + "]";
  return v.type_name();
}

}  // namespace

std::shared_ptr<Holder> OwnerIndex::holder_for(RRefId id, std::shared_ptr<Holder> fresh) {
  std::lock_guard<std::mutex> lock(mtx_);
  auto& e = entries_[id];
  if (!e.holder) e.holder = fresh ? std::move(fresh) : std::make_shared<Holder>();
  return e.holder;
}

std::shared_ptr<Holder> OwnerIndex::find(RRefId id) const {
  std::lock_guard<std::mutex> lock(mtx_);
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : it->second.holder;
}

void OwnerIndex::added(RRefId id, std::shared_ptr<Holder> holder, std::shared_ptr<OwnerStats> stats) {
  std::lock_guard<std::mutex> lock(mtx_);
  entries_[id] = Entry{std::move(holder), std::move(stats)};
}

void OwnerIndex::removed(RRefId id) {
  // The value may end with its entry (a user object's destructor, which may
  // make an RRef of its own and so come back here): after the lock.
  Entry gone;
  std::lock_guard<std::mutex> lock(mtx_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  gone = std::move(it->second);
  entries_.erase(it);
}

std::vector<OwnedRRefInfo> OwnerIndex::owned() const {
  auto now = std::chrono::steady_clock::now();
  std::vector<OwnedRRefInfo> out;
  std::lock_guard<std::mutex> lock(mtx_);
  for (auto& [id, e] : entries_) {
    if (!e.stats) continue;  // started on arrival; its owner is a message away
    OwnedRRefInfo info;
    info.id = to_string(id);
    info.type = describe_held(*e.holder, info.bytes);
    info.forks = e.stats->forks.load();
    info.age_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - e.stats->created).count();
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace castor::detail
