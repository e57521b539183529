// World snapshots and the membership that publishes them.
#include "actors/cluster/world.hpp"

#include <stdexcept>

namespace castor::detail {

// Note [World]
// ~~~~~~~~~~~~
// Every part of a worker asks the same questions -- is rank r a peer, is it
// alive, what is its actor, its name, its bulk port -- from different
// threads (callers, the executor, the worker actor, protocol actors, bulk
// readers). The answers live in one immutable World snapshot; a change is a
// new snapshot published by Membership:
//  M1 A World never changes after it is published. A change (the join
//     learning names, then handles; a death; later a rejoin) is a new World
//     with the next epoch, made from the current one.
//  M2 One writer at a time (Membership::update): the join while it runs,
//     then the worker actor (deaths). After publishing, the writer runs the
//     change hooks with the old and the new World: the one place where later
//     work extends what a change does (a rejoin, a lane keyed by
//     incarnation). Note [Direct sends] relies on the order: a peer is marked
//     dead (published) before its pending calls are failed.
//  M3 World::has is the only bounds check of a rank; peer(r) answers "a live,
//     connected peer, or nothing", so no caller indexes a table by a rank a
//     peer sent.
//  M4 Readers hold a plain reference (current()), with no lock and no count,
//     so a snapshot is never freed while the worker runs: Membership keeps
//     every one. A world publishes a handful during the join and one per
//     death, each about 200 bytes a member: a 128-worker world that lost 10
//     workers keeps ~15 snapshots, ~400 KB.

Member Member::from(const WorkerRecord& r) {
  Member m;
  m.name = r.name;
  m.rank = r.rank;
  m.host = r.host;
  m.port = r.port;
  m.bulk_port = r.bulk_port;
  m.pid = r.pid;
  m.incarnation = r.incarnation;
  m.alive = r.alive;
  return m;
}

WorkerRecord Member::record() const { return WorkerRecord{name, rank, host, port, bulk_port, pid, incarnation, alive}; }

World::World(WorkerId self, uint64_t epoch, std::vector<Member> members)
    : self_(self), epoch_(epoch), members_(std::move(members)) {
  for (size_t r = 0; r < members_.size(); ++r) {
    if (members_[r].rank != WorkerId(r))
      throw std::logic_error("castor: world member " + members_[r].name + " is at index " + std::to_string(r) +
                             " but has rank " + std::to_string(members_[r].rank));
    by_name_[members_[r].name] = WorkerId(r);
  }
}

const std::string& World::self_name() const {
  static const std::string unknown = "?";
  return has(self_) ? members_[size_t(self_)].name : unknown;
}

std::optional<WorkerId> World::rank_of(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

std::string World::name_of(WorkerId r) const {
  if (has(r) && !members_[size_t(r)].name.empty()) return members_[size_t(r)].name;
  return "rank " + std::to_string(r);
}

bool World::alive(WorkerId r) const { return r == self_ || (has(r) && members_[size_t(r)].alive); }

std::optional<worker_peer> World::peer(WorkerId r) const {
  if (r == self_ || !has(r)) return std::nullopt;
  const auto& m = members_[size_t(r)];
  if (!m.alive || !m.handle) return std::nullopt;
  return m.handle;
}

World World::with_members(std::vector<Member> members) const {
  // Keep what the new records do not carry: handles, liveness as this
  // worker found it.
  for (auto& m : members)
    if (has(m.rank) && members_[size_t(m.rank)].name == m.name) {
      const auto& old = members_[size_t(m.rank)];
      m.handle = old.handle;
      m.alive = old.alive;
      m.died_at = old.died_at;
    }
  return World(self_, epoch_ + 1, std::move(members));
}

World World::with_handles(const std::vector<worker_peer>& by_rank) const {
  auto members = members_;
  for (size_t r = 0; r < members.size() && r < by_rank.size(); ++r)
    if (by_rank[r] && WorkerId(r) != self_) members[r].handle = by_rank[r];
  return World(self_, epoch_ + 1, std::move(members));
}

World World::with_death(WorkerId r, std::chrono::system_clock::time_point when) const {
  auto members = members_;
  if (has(r)) {
    members[size_t(r)].alive = false;
    members[size_t(r)].died_at = when;
  }
  return World(self_, epoch_ + 1, std::move(members));
}

World World::with_rejoin(Member m) const {
  auto members = members_;
  if (has(m.rank)) {
    m.alive = true;
    m.died_at = {};
    members[size_t(m.rank)] = std::move(m);
  }
  return World(self_, epoch_ + 1, std::move(members));
}

bool World::any_rejoined() const {
  for (const auto& m : members_)
    if (m.incarnation > 1) return true;
  return false;
}

Membership::Membership() {
  history_.push_back(std::make_shared<const World>());
  current_.store(history_.back().get(), std::memory_order_release);
}

void Membership::update(const std::function<World(const World&)>& f) {
  std::vector<Hook> hooks;
  const World* before;
  const World* after;
  {
    std::lock_guard<std::mutex> lock(mtx_);
    before = current_.load(std::memory_order_relaxed);
    auto next = std::make_shared<const World>(f(*before));
    if (next->epoch() != before->epoch() + 1)
      throw std::logic_error("castor: a new world must have the next epoch (" + std::to_string(before->epoch() + 1) +
                             "), got " + std::to_string(next->epoch()));
    history_.push_back(next);
    after = next.get();
    current_.store(after, std::memory_order_release);
    hooks = hooks_;
  }
  for (auto& h : hooks) h(*before, *after);
}

void Membership::on_change(Hook hook) {
  std::lock_guard<std::mutex> lock(mtx_);
  hooks_.push_back(std::move(hook));
}

}  // namespace castor::detail
