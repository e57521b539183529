// The worker actor's behavior: each handler delegates to a named *_impl.
#include "actors/runtime/worker_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/calls/delivery.hpp"
#include "actors/runtime/runtime.hpp"
#include "actors/runtime/worker_state.hpp"

namespace castor::detail {
namespace {

worker_actor::behavior_type worker_behavior(worker_pointer self, Runtime* rt) {
  self->state.rt = rt;
  self->state.peers.resize(size_t(rt->opts.world_size));
  if (rt->rank() == 0 && rt->opts.cluster.empty()) {  // a masterless join needs none
    self->state.name_store = spawn_name_store(self->system(), make_join_request(*rt));
    self->link_to(self->state.name_store);  // it ends with the worker
  }
  self->set_down_handler([self](caf::down_msg& dm) { on_peer_down_impl(self, dm); });
  // Anything else (a message from a newer or hostile peer) is dropped, not fatal.
  // Malformed ones too (drop_malformed): see Note [Hostile input].
  self->set_default_handler(
      [self](caf::scheduled_actor*, caf::message_view& x) -> caf::result<caf::message> { return drop_unexpected(self, x); });
  return {
      // -- peers ------------------------------------------------------------
      [self](hello_atom, WorkerId from) {
        if (drop_stale(self)) return;
        add_peer_impl(self, from, caf::actor_cast<worker_peer>(self->current_sender()));
      },
      [self](peer_atom, WorkerId rank, worker_peer handle) {
        bool ok = add_peer_impl(self, rank, handle);
        if (ok) self->send(handle, hello_atom::value, self->state.rt->rank());
        return ok;
      },
      [self](ready_atom) -> caf::result<std::vector<worker_peer>> {
        if (all_peers_known(self)) return peer_handles(self);
        auto rp = self->make_response_promise<std::vector<worker_peer>>();
        self->state.ready_waiters.push_back(rp);
        return rp;
      },
      // -- calls ------------------------------------------------------------
      [self](CallRequest& req) {
        if (drop_stale(self) || drop_malformed(self, req)) return;
        self->state.rt->stats.count(MessageType::call_request);
        if (self->state.rt->state.load() == RunState::starting) {  // J3 of Note [Masterless join]
          self->state.held_calls.emplace_back(std::move(req), self->current_sender());
          return;
        }
        handle_request_impl(self, std::move(req), self->current_sender());
      },
      [self](running_atom) {
        auto held = std::move(self->state.held_calls);
        self->state.held_calls.clear();
        for (auto& [req, sender] : held) handle_request_impl(self, std::move(req), sender);
      },
      [self](CallReply& reply) {
        if (drop_stale(self) || drop_malformed(self, reply)) return;
        self->state.rt->stats.count(MessageType::call_reply);
        handle_reply_impl(self, std::move(reply));
      },
      [self](TensorChunk& chunk) {
        if (drop_stale(self) || drop_malformed(self, chunk)) return;
        self->state.rt->stats.count(MessageType::tensor_chunk);
        handle_chunk_impl(self, std::move(chunk));
      },
      [self](RRefControl& msg) {
        if (drop_stale(self) || drop_malformed(self, msg)) return;
        deliver_protocol(*self->state.rt, std::move(msg));
      },
      [self](RRefControlAck& ack) {
        if (drop_stale(self)) return;
        deliver_protocol(*self->state.rt, std::move(ack));
      },
      // -- distributed autograd (counted messages, see Note [Graceful shutdown])
      [self](BackwardGrad& g) {
        if (drop_stale(self) || drop_malformed(self, g)) return;
        deliver_protocol(*self->state.rt, std::move(g));
      },
      [self](BackwardDone& d) {
        if (drop_stale(self) || drop_malformed(self, d)) return;
        deliver_protocol(*self->state.rt, std::move(d));
      },
      [self](ContextControl& c) {
        if (drop_stale(self) || drop_malformed(self, c)) return;
        deliver_protocol(*self->state.rt, std::move(c));
      },
      [self](sweep_atom) { sweep_impl(self); },
      // -- rendezvous (rank 0 serves it through its name store) ---------------
      [self](join_atom atm, JoinRequest& req) -> caf::result<JoinReply> {
        auto* rt = self->state.rt;
        if (req.self.incarnation > 1) return accept_rejoin_impl(self, req);  // Note [Rejoin]
        if (!rt->opts.cluster.empty()) {  // masterless: a peer checks in with us directly
          auto& mine = self->state.own_join_request;
          if (!mine) mine = make_join_request(*rt);
          if (auto why = incompatibility(*mine, req, "worker '" + rt->name() + "'"); !why.empty())
            return JoinReply{false, false, why, {}};
          return JoinReply{true, false, {}, {mine->self}};
        }
        if (!self->state.name_store) return JoinReply{false, false, self->state.rt->name() + " is not the rendezvous master", {}};
        return self->delegate(self->state.name_store, atm, std::move(req));
      },
      [self](joined_atom atm, WorkerId rank) -> caf::result<bool> {
        if (!self->state.name_store) return false;
        return self->delegate(self->state.name_store, atm, rank);
      },
      [self](info_atom atm) -> caf::result<std::vector<WorkerRecord>> {
        if (!self->state.name_store) return std::vector<WorkerRecord>{};
        return self->delegate(self->state.name_store, atm);
      },
      // -- shutdown -----------------------------------------------------------
      [self](ShutdownCommand& cmd) { begin_shutdown_impl(self, std::move(cmd)); },
      [self](shutdown_atom, WorkerId rank) {
        if (!drop_stale(self)) on_shutdown_entered_impl(self, rank);
      },
      [self](probe_atom) { start_wave_impl(self); },
      [self](deadline_atom) { on_shutdown_deadline_impl(self); },
      [self](deadline_atom, std::string& summary) {
        auto answer = self->response(true);  // S5 of Note [Graceful shutdown]: answer, then finish
        on_shutdown_deadline_from_coordinator_impl(self, summary);
        return answer;
      },
      [self](stop_atom, WorkerId rank) { fail_shutdown_impl(self, rank); },
      [self](probe_atom, int64_t round) { return local_report_impl(self, round); },
      [self](done_atom) {
        auto answer = self->response(true);  // S5 of Note [Graceful shutdown]: answer, then finish
        finish_shutdown_impl(self, std::nullopt);
        return answer;
      },
  };
}

}  // namespace

worker_actor spawn_worker_actor(Runtime& rt) {
  return spawn_protocol_actor(*rt.system, worker_behavior, &rt);  // Note [Where actors run]
}

}  // namespace castor::detail
