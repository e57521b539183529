// Adoption: forks that arrive here (in a request's arguments, a reply, a
// fetched value) become local references, by the sharing case of each (see
// Note [RRef protocol]; ForkTable decides, this sends).
#include "actors/hooks/worker_services.hpp"
#include "rref/calls/call_preparation.hpp"
#include "rref/context_state.hpp"
#include "rref/rref_runtime.hpp"

namespace castor::detail {
namespace {

// RS4 of Note [Restartable values]: a restartable fork made by an owner's
// life that died and came back since re-registers with the new life (the
// old life's count of it, or its pending child at the parent, died with it).
bool re_register_stale(context_pointer self, const RRefStatePtr& state, const RRefForkData& d) {
  if (!state->restart) return false;
  const auto& world = self->state.rt->world();
  if (!world.has(d.owner) || !world.alive(d.owner)) return false;
  auto life = world.member(d.owner).incarnation;
  if (state->owner_incarnation.load() >= life) return false;
  re_register(self, state, life, d.parent);
  return true;
}

}  // namespace

void adopt_value(context_pointer self, Value& v, PreparedCallId waiting) {
  auto& st = self->state;
  v.for_each_rref([&](RRefValue& rv) {
    if (rv.handle) return;  // already local (a call to ourselves)
    const auto& d = rv.data;
    switch (st.forks->arrival_of(d)) {
      case Arrival::at_owner: {
        auto arrived = st.forks->arrived_at_owner(d);
        auto holder = to_owner(self, arrived.local_ref);
        if (!holder) {
          holder = std::make_shared<Holder>();
          holder->set_error(gone_error(self, d.rref_id));
        }
        rv.handle = st.rr->new_owner_state(d.rref_id, holder, d.type_name);
        if (arrived.release_parent) send_control(self, *arrived.release_parent);
        return;
      }
      case Arrival::from_owner: {
        auto state = st.rr->new_user_state(d.rref_id, d.owner, d.fork_id, d.type_name, &d);
        rv.handle = state;
        if (re_register_stale(self, state, d)) return;
        st.forks->arrived_from_owner(*state);
        return;
      }
      case Arrival::from_user: {
        auto state = st.rr->new_user_state(d.rref_id, d.owner, d.fork_id, d.type_name, &d);
        rv.handle = state;
        if (re_register_stale(self, state, d)) return;
        if (waiting) st.prepared.wait(waiting);
        auto arrived = st.forks->arrived_from_user(state, d.parent, waiting);
        if (arrived.fork_request) send_control(self, *arrived.fork_request);
        if (arrived.owner_dead && waiting) fork_lost_for(self, {waiting}, d.owner, d.rref_id);
        return;
      }
    }
  });
}

}  // namespace castor::detail
