// The atoms of castor's actor interfaces (CAF 0.17: at most 10 characters).
#pragma once

#include <caf/atom.hpp>

namespace castor {

using hello_atom = caf::atom_constant<caf::atom("c_hello")>;
using join_atom = caf::atom_constant<caf::atom("c_join")>;
using joined_atom = caf::atom_constant<caf::atom("c_joined")>;
using peer_atom = caf::atom_constant<caf::atom("c_peer")>;
using ready_atom = caf::atom_constant<caf::atom("c_ready")>;
using running_atom = caf::atom_constant<caf::atom("c_running")>;
using sweep_atom = caf::atom_constant<caf::atom("c_sweep")>;
using probe_atom = caf::atom_constant<caf::atom("c_probe")>;
using shutdown_atom = caf::atom_constant<caf::atom("c_shutdown")>;
using done_atom = caf::atom_constant<caf::atom("c_done")>;
using stop_atom = caf::atom_constant<caf::atom("c_stop")>;
using deadline_atom = caf::atom_constant<caf::atom("c_deadline")>;
using info_atom = caf::atom_constant<caf::atom("c_info")>;
using released_atom = caf::atom_constant<caf::atom("r_released")>;
using peer_down_atom = caf::atom_constant<caf::atom("r_peerdown")>;
using rejoined_atom = caf::atom_constant<caf::atom("r_rejoined")>;
using retry_atom = caf::atom_constant<caf::atom("r_retry")>;
using owner_gone_atom = caf::atom_constant<caf::atom("r_gone")>;
using create_by_atom = caf::atom_constant<caf::atom("r_createby")>;

}  // namespace castor
