// Name store actor: validates joiners, answers them all once the world is
// complete, and frees the slot of a joiner that goes away before that.
#include "actors/cluster/name_store.hpp"

#include <algorithm>
#include <map>
#include <set>

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

namespace castor::detail {
namespace {

struct Joiner {
  uint64_t seq = 0;  // tells this joiner's timer from a later joiner's of the same rank
  WorkerRecord record;
  caf::actor_addr source;  // the joining process' actor, monitored until the world is complete
  caf::typed_response_promise<JoinReply> promise;
};

struct name_store_state {
  static inline const char* name = "castor.name_store";
  JoinRequest reference;
  std::map<WorkerId, Joiner> joined;  // by rank; complete at world_size
  bool complete = false;
  uint64_t next_seq = 1;
  // The final barrier: ranks that are connected to all their peers.
  std::set<WorkerId> connected;
  std::vector<caf::typed_response_promise<bool>> barrier;
};

using name_store_pointer = name_store_actor::stateful_pointer<name_store_state>;

// Lists what differs between two sorted signature lists (at most a few lines).
std::string signature_diff(const std::vector<std::string>& mine, const std::vector<std::string>& theirs,
                           const std::string& reference) {
  std::vector<std::string> missing, extra;
  std::set_difference(mine.begin(), mine.end(), theirs.begin(), theirs.end(), std::back_inserter(missing));
  std::set_difference(theirs.begin(), theirs.end(), mine.begin(), mine.end(), std::back_inserter(extra));
  std::string out;
  auto list = [&](const char* what, const std::vector<std::string>& xs) {
    for (size_t i = 0; i < xs.size() && i < 5; ++i) out += std::string("\n  ") + what + xs[i];
    if (xs.size() > 5) out += "\n  ... and " + std::to_string(xs.size() - 5) + " more";
  };
  list(("only on " + reference + ": ").c_str(), missing);
  list("only on the joiner: ", extra);
  return out;
}

}  // namespace

std::string incompatibility(const JoinRequest& reference, const JoinRequest& req, const std::string& ref) {
  const auto& who = req.self;
  std::string label = "worker '" + who.name + "' (rank " + std::to_string(who.rank) + ")";
  if (req.wire_version != reference.wire_version)
    return label + " speaks wire protocol version " + std::to_string(req.wire_version) + ", " + ref + " speaks " +
           std::to_string(reference.wire_version);
  if (req.world_size != reference.world_size)
    return label + " expects world_size " + std::to_string(req.world_size) + ", " + ref + " expects " +
           std::to_string(reference.world_size);
  if (who.rank < 0 || who.rank >= reference.world_size)
    return label + ": rank out of range [0, " + std::to_string(reference.world_size) + ")";
  if (who.name.empty()) return label + ": empty worker name";
  if (req.autograd_mode != reference.autograd_mode)
    return label + " uses autograd mode '" + req.autograd_mode + "', " + ref + " uses '" + reference.autograd_mode +
           "' (all workers must use the same mode)";
  if (req.signatures != reference.signatures)
    return label + " registered different functions or classes than " + ref + ":" +
           signature_diff(reference.signatures, req.signatures, ref);
  return {};
}

namespace {

// Why `req` may not join, or an empty string.
std::string refusal(name_store_pointer self, const JoinRequest& req) {
  auto& st = self->state;
  const auto& who = req.self;
  std::string label = "worker '" + who.name + "' (rank " + std::to_string(who.rank) + ")";
  if (auto why = incompatibility(st.reference, req, "rank 0"); !why.empty()) return why;
  auto it = st.joined.find(who.rank);
  if (it != st.joined.end())
    return label + ": rank " + std::to_string(who.rank) + " is already taken by worker '" + it->second.record.name +
           "' at " + it->second.record.host + ":" + std::to_string(it->second.record.port);
  for (const auto& [rank, j] : st.joined)
    if (j.record.name == who.name)
      return label + ": the name '" + who.name + "' is already taken by rank " + std::to_string(rank);
  if (st.complete) return label + ": the world is already complete";
  return {};
}

std::string missing_ranks(name_store_pointer self) {
  std::string out;
  for (WorkerId r = 0; r < self->state.reference.world_size; ++r)
    if (!self->state.joined.count(r)) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

// A joiner's time is up: it hears which ranks are missing. When rank 0 itself
// gives up, everyone waiting does, since the rendezvous goes away with it.
void on_joiner_timeout(name_store_pointer self, uint64_t seq) {
  auto& st = self->state;
  if (st.complete) return;
  auto it = std::find_if(st.joined.begin(), st.joined.end(), [seq](const auto& kv) { return kv.second.seq == seq; });
  if (it == st.joined.end()) return;
  bool master_gives_up = it->first == 0;
  JoinReply reply;
  reply.timed_out = true;
  reply.error = "timed out waiting for ranks " + missing_ranks(self) + " to join (world_size " +
                std::to_string(st.reference.world_size) + ")";
  if (master_gives_up) {
    for (auto& [rank, j] : st.joined) j.promise.deliver(reply);
    st.joined.clear();
  } else {
    it->second.promise.deliver(reply);
    st.joined.erase(it);
  }
}

void complete_world(name_store_pointer self) {
  auto& st = self->state;
  st.complete = true;
  JoinReply reply;
  reply.ok = true;
  for (auto& [rank, j] : st.joined) {
    reply.workers.push_back(j.record);
    self->demonitor(j.source);
  }
  for (auto& [rank, j] : st.joined) j.promise.deliver(reply);
}

}  // namespace

name_store_actor spawn_name_store(caf::actor_system& sys, JoinRequest reference) {
  return sys.spawn([reference](name_store_pointer self) -> name_store_actor::behavior_type {
    self->state.reference = reference;
    // A joiner that goes away before the world is complete frees its rank.
    self->set_down_handler([self](caf::down_msg& dm) {
      auto& joined = self->state.joined;
      if (self->state.complete) return;
      for (auto it = joined.begin(); it != joined.end(); ++it)
        if (it->second.source == dm.source) {
          joined.erase(it);
          return;
        }
    });
    return {
        [self](join_atom, JoinRequest& req) -> caf::result<JoinReply> {
          auto why = refusal(self, req);
          if (!why.empty()) return JoinReply{false, false, why, {}};
          auto rp = self->make_response_promise<JoinReply>();
          auto source = caf::actor_cast<caf::actor_addr>(self->current_sender());
          if (source) self->monitor(source);
          auto rank = req.self.rank;
          auto seq = self->state.next_seq++;
          // Answer a little before the joiner gives up, so that it learns which
          // ranks are missing while the rendezvous is still there.
          auto wait = std::chrono::milliseconds(std::max<int64_t>(1, req.timeout_ms * 9 / 10));
          self->delayed_send(self, wait, sweep_atom::value, seq);
          self->state.joined.emplace(rank, Joiner{seq, std::move(req.self), source, rp});
          if (self->state.joined.size() == size_t(self->state.reference.world_size)) complete_world(self);
          return rp;
        },
        [self](sweep_atom, uint64_t seq) { on_joiner_timeout(self, seq); },
        [self](joined_atom, WorkerId rank) -> caf::result<bool> {
          // init_rpc returns on every worker only once every worker can call
          // every other one (and so can make nested calls at once).
          auto& st = self->state;
          st.connected.insert(rank);
          auto rp = self->make_response_promise<bool>();
          st.barrier.push_back(rp);
          if (st.connected.size() == size_t(st.reference.world_size)) {
            for (auto& p : st.barrier) p.deliver(true);
            st.barrier.clear();
          }
          return rp;
        },
        [self](info_atom) {
          std::vector<WorkerRecord> out;
          for (const auto& [rank, j] : self->state.joined) out.push_back(j.record);
          return out;
        },
    };
  });
}

}  // namespace castor::detail
