// Joining the world: listen, register with the name store on rank 0 (retrying
// until it is up), then connect to every lower rank; higher ranks connect to
// us. One TCP connection per pair of workers.
#include "actors/cluster/rendezvous.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "actors/api/errors.hpp"
#include "actors/cluster/join_steps.hpp"
#include "actors/cluster/launch_notes.hpp"
#include "actors/transport/bulk/bulk_path.hpp"
#include "actors/transport/caf_links.hpp"
#include "actors/transport/transport.hpp"

namespace castor::detail {

using std::chrono::milliseconds;

void fail_init(const std::string& who, ErrorKind kind, const std::string& msg) {
  throw_rpc_error(ErrorInfo{kind, who, "init_rpc(" + who + "): " + msg});
}

milliseconds left_until(std::chrono::steady_clock::time_point deadline) {
  auto d = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
  return d.count() > 0 ? d : milliseconds(1);
}

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

// The local address on the route to `host` (no packet is sent).
std::string local_address_towards(const std::string& host, uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return "127.0.0.1";
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(port ? port : 9);
  std::string out = "127.0.0.1";
  if (::inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host.c_str(), &dst.sin_addr) == 1 &&
      ::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) == 0) {
    sockaddr_in me{};
    socklen_t len = sizeof(me);
    char buf[INET_ADDRSTRLEN];
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0 &&
        ::inet_ntop(AF_INET, &me.sin_addr, buf, sizeof(buf)))
      out = buf;
  }
  ::close(fd);
  return out;
}

}  // namespace

// Connects to a worker through its door (Note [The door]), retrying until
// `deadline` while nobody listens there yet (every rank may start at once).
worker_peer connect_with_retry(Runtime& rt, const std::string& host, uint16_t port,
                               std::chrono::steady_clock::time_point deadline, const std::string& what) {
  auto pause = milliseconds(20);
  int refused_handshakes = 0;
  auto where = what + " at " + host + ":" + std::to_string(port);
  auto ifs = rt.system->message_types<worker_peer>();
  for (;;) {
    auto link = connect_actor(*rt.system, rt.transport->dial_options(), host, port, ifs, deadline);
    if (link.actor) return caf::actor_cast<worker_peer>(std::move(link.actor));
    // A door that refuses our greeting, or something else listening there,
    // will not change its mind before the init timeout.
    if (link.failure == DialFailure::refused || link.failure == DialFailure::not_castor)
      fail_init(rt.name(), ErrorKind::Unreachable, "cannot reach " + where + ": " + link.error);
    // A TLS peer that drops the handshake again and again does not accept
    // our certificate (or we not its): waiting would not change that.
    refused_handshakes = link.failure == DialFailure::tls ? refused_handshakes + 1 : 0;
    if (refused_handshakes >= 3)
      fail_init(rt.name(), ErrorKind::Unreachable,
           "cannot reach " + where + ": " + link.error + " (" + std::to_string(refused_handshakes) +
               " times in a row); are both certificates signed by the cluster CA?");
    if (std::chrono::steady_clock::now() + pause >= deadline)
      fail_init(rt.name(), ErrorKind::Unreachable,
           "cannot reach " + where + " within " + std::to_string(rt.opts.init_timeout.count()) + " ms: " + link.error);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, milliseconds(250));
  }
}

namespace {

std::string missing_ranks(const std::vector<WorkerRecord>& joined, int world_size) {
  std::vector<bool> seen(size_t(world_size), false);
  for (const auto& r : joined)
    if (r.rank >= 0 && r.rank < world_size) seen[size_t(r.rank)] = true;
  std::string out;
  for (int r = 0; r < world_size; ++r)
    if (!seen[size_t(r)]) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace

WorkerOptions resolve_options(WorkerOptions o) {
  if (o.rank < 0) o.rank = std::atoi(env_or("RANK", "-1").c_str());
  if (o.world_size < 0) o.world_size = std::atoi(env_or("WORLD_SIZE", "-1").c_str());
  if (o.master.host.empty()) o.master.host = env_or("MASTER_ADDR", "");
  if (o.master.port == 0) o.master.port = uint16_t(std::atoi(env_or("MASTER_PORT", "0").c_str()));
  if (o.secret.empty()) o.secret = env_or("CASTOR_SECRET", "");  // Note [The door]
  if (o.name.empty() && o.rank >= 0) o.name = "worker" + std::to_string(o.rank);
  std::string who = o.name.empty() ? "?" : o.name;
  if (o.world_size <= 0) fail_init(who, ErrorKind::Lookup, "world_size is not set (WorkerOptions::world_size or WORLD_SIZE)");
  if (o.world_size > 32767) fail_init(who, ErrorKind::Lookup, "world_size above 32767 is not supported");
  if (o.rank < 0 || o.rank >= o.world_size)
    fail_init(who, ErrorKind::Lookup,
         "rank " + std::to_string(o.rank) + " is not in [0, " + std::to_string(o.world_size) +
             ") (WorkerOptions::rank or RANK)");
  if (o.master.host.empty()) fail_init(who, ErrorKind::Lookup, "master address is not set (WorkerOptions::master or MASTER_ADDR)");
  if (o.master.port == 0) fail_init(who, ErrorKind::Lookup, "master port is not set (WorkerOptions::master or MASTER_PORT)");
  if (o.num_worker_threads == 0) o.num_worker_threads = 1;
  if (o.incarnation == 0) {
    auto text = env_or("CASTOR_INCARNATION", "1");
    char* end = nullptr;
    auto n = std::strtoul(text.c_str(), &end, 10);
    if (end == text.c_str() || *end || n < 1 || n > kMaxIncarnation)
      fail_init(who, ErrorKind::Lookup,
           "CASTOR_INCARNATION must be a number from 1 to " + std::to_string(kMaxIncarnation) + ", not '" + text + "'");
    o.incarnation = uint32_t(n);
  }
  if (o.incarnation > kMaxIncarnation)
    fail_init(who, ErrorKind::Lookup,
         "incarnation " + std::to_string(o.incarnation) + " is above " + std::to_string(kMaxIncarnation));
  if (o.host.empty()) o.host = o.rank == 0 ? o.master.host : local_address_towards(o.master.host, o.master.port);
  if (o.rank == 0) o.port = o.master.port;  // rank 0's worker actor is the rendezvous point
  return o;
}

// Hands a connected peer to the worker actor (which says hello to it).
void register_peer(Runtime& rt, caf::scoped_actor& self, WorkerId r, const worker_peer& h, const std::string& name,
                   std::chrono::steady_clock::time_point deadline) {
  bool ok = false;
  self->request(rt.actor, left_until(deadline), peer_atom::value, r, h)
      .receive([&](bool b) { ok = b; }, [](caf::error&) {});
  if (!ok) fail_init(rt.name(), ErrorKind::Internal, "could not register peer " + name);
}

namespace {

// Waits until every higher rank has connected to us; every peer's handle, by rank.
std::vector<worker_peer> await_higher_ranks(Runtime& rt, caf::scoped_actor& self,
                                            std::chrono::steady_clock::time_point deadline) {
  std::vector<worker_peer> handles;
  bool ready = false;
  self->request(rt.actor, left_until(deadline), ready_atom::value)
      .receive(
          [&](std::vector<worker_peer>& peers) {
            handles = std::move(peers);
            ready = true;
          },
          [](caf::error&) {});
  if (!ready)
    fail_init(rt.name(), ErrorKind::Timeout,
         "timed out after " + std::to_string(rt.opts.init_timeout.count()) + " ms waiting for higher ranks to connect");
  return handles;
}

}  // namespace

// Note [World] M1: the join publishes the world in steps, each a new epoch.
void publish_members(Runtime& rt, std::vector<Member> members) {
  rt.membership.update([&](const World& w) {
    return w.size() == 0 ? World(rt.rank(), w.epoch() + 1, std::move(members)) : w.with_members(std::move(members));
  });
}

void publish_handles(Runtime& rt, const std::vector<worker_peer>& handles) {
  rt.membership.update([&](const World& w) { return w.with_handles(handles); });
}

// From here this worker can call every peer; calls that arrived early run
// now (J3 of Note [Masterless join]).
void declare_running(Runtime& rt) {
  rt.state.store(RunState::running);
  caf::anon_send(rt.actor, running_atom::value);
}

namespace {

// Note [Masterless join]
// ~~~~~~~~~~~~~~~~~~~~~~
// When every worker's name and address is known up front (a cluster file),
// no worker serves a rendezvous. Each worker connects to every lower rank and
// checks in with it (join_atom: the peer makes the name store's compatibility
// checks against its own join data and answers with its record: bulk port,
// pid); higher ranks connect to it the same way, and once they all have, it
// checks in with each of them over that link. A worker that starts late is
// waited for up to the init timeout; a wrong name or rank at an address, or
// an incompatible peer, fails init naming that peer.
//  J1 One connection per pair, opened by the higher rank, as in the master
//     join: CAF 0.17 does not merge two connections between the same nodes
//     opened at once.
//  J2 The world's names and addresses are in the table before we publish:
//     a peer that finished its join first may call us at once.
//  J3 There is no barrier at the end (nobody to hold it), so such a call can
//     arrive while we still wait for a higher rank. The worker actor holds
//     calls until init declares us running (declare_running): run earlier,
//     a call could make a nested call to a peer we do not know yet, and
//     would be refused as "not running". The master join needs no hold (its
//     joined_atom barrier), but takes the same path.
void join_masterless(Runtime& rt, std::chrono::steady_clock::time_point deadline) {
  const auto& cluster = rt.opts.cluster;
  auto n = size_t(rt.opts.world_size);
  auto mine = make_join_request(rt);
  auto members = rt.world().members();  // what only each peer knows is added below
  caf::scoped_actor self{*rt.system};
  // Checks in with `h`, the worker the cluster lists as rank `r`; its record.
  auto check_in = [&](size_t r, const worker_peer& h) {
    const auto& m = cluster[r];
    auto where = m.host + ":" + std::to_string(m.port);
    JoinReply reply;
    bool answered = false;
    caf::error failure;
    self->request(h, left_until(deadline), join_atom::value, mine)
        .receive([&](JoinReply& x) { reply = std::move(x), answered = true; },
                 [&](caf::error& e) { failure = std::move(e); });
    if (!answered) {
      // N2 of Note [Launch notes]: rank 0 went away while this worker joined.
      if (r == 0 && rt.rank() != 0 && failure != caf::sec::request_timeout)
        tell_launcher(kRankZeroLost, m.name + ": did not answer while " + rt.name() + " joined");
      fail_init(rt.name(), failure == caf::sec::request_timeout ? ErrorKind::Timeout : ErrorKind::Unreachable,
           "worker " + m.name + " at " + where + " did not answer: " + rt.system->render(failure));
    }
    if (!reply.ok) fail_init(rt.name(), ErrorKind::Lookup, reply.error);
    if (reply.workers.size() != 1 || reply.workers[0].rank != WorkerId(r) || reply.workers[0].name != m.name)
      fail_init(rt.name(), ErrorKind::Lookup,
           "the worker at " + where + " is '" + (reply.workers.empty() ? "?" : reply.workers[0].name) + "' (rank " +
               std::to_string(reply.workers.empty() ? -1 : reply.workers[0].rank) + "), the cluster says '" + m.name +
               "' (rank " + std::to_string(r) + ")");
    // Names and addresses are in the world already (J2); add what only the
    // peer knows.
    members[r].bulk_port = reply.workers[0].bulk_port;
    members[r].pid = reply.workers[0].pid;
  };
  // Lower ranks: connect and check in, then register them (they hear hello).
  // Only one side of a pair connects (J1).
  for (size_t r = 0; r < size_t(rt.rank()); ++r) {
    auto h = connect_with_retry(rt, cluster[r].host, cluster[r].port, deadline, "worker " + cluster[r].name);
    check_in(r, h);
    register_peer(rt, self, WorkerId(r), h, cluster[r].name, deadline);
  }
  auto handles = await_higher_ranks(rt, self, deadline);
  // Higher ranks connected to us: check in with them over those links.
  for (size_t r = size_t(rt.rank()) + 1; r < n; ++r) check_in(r, handles[r]);
  publish_members(rt, std::move(members));
  publish_handles(rt, handles);
  declare_running(rt);
}

}  // namespace

void join_world(Runtime& rt) {
  auto deadline = std::chrono::steady_clock::now() + rt.opts.init_timeout;
  if (!rt.opts.cluster.empty() && rt.opts.cluster.size() != size_t(rt.opts.world_size))
    fail_init(rt.name(), ErrorKind::Lookup,
         "the cluster lists " + std::to_string(rt.opts.cluster.size()) + " workers, world_size is " +
             std::to_string(rt.opts.world_size));
  // Note [The door]: peers reach the worker actor only through the door
  // (and with TLS, only over TLS: Note [TLS]). serve_actor listens with
  // SO_REUSEADDR on every rank: a fixed port (a cluster file's) must be
  // usable again while the last job's connections on it are in TIME_WAIT;
  // Linux still refuses a second listener on a port that is in use.
  uint16_t port = 0;
  try {
    port = serve_actor(*rt.system, rt.transport->door(), rt.opts.host, rt.opts.port, rt.transport->tls(),
                       caf::actor_cast<caf::strong_actor_ptr>(rt.actor), rt.system->message_types<worker_peer>());
  } catch (const std::exception& e) {
    fail_init(rt.name(), ErrorKind::Unreachable,
         "cannot listen on " + rt.opts.host + ":" + std::to_string(rt.opts.port) + ": " + e.what());
  }
  // The first world: ourselves as we listen, and (J2 of Note [Masterless
  // join]) every name and address a cluster lists, before anyone can call us.
  std::vector<Member> members(size_t(rt.opts.world_size));
  for (size_t r = 0; r < members.size(); ++r) {
    members[r].rank = WorkerId(r);
    if (r < rt.opts.cluster.size()) {
      const auto& m = rt.opts.cluster[r];
      members[r].name = m.name, members[r].host = m.host, members[r].port = m.port;
    }
  }
  auto& me = members[size_t(rt.rank())];
  me.name = rt.name(), me.host = rt.opts.host, me.port = port;
  me.bulk_port = uint16_t(rt.bulk ? rt.bulk->port() : 0), me.pid = int32_t(::getpid());
  me.incarnation = rt.opts.incarnation;
  publish_members(rt, std::move(members));
  if (rt.opts.incarnation > 1) return rejoin_world(rt, deadline);  // Note [Rejoin]
  if (!rt.opts.cluster.empty()) return join_masterless(rt, deadline);  // Note [Masterless join]

  worker_peer master = rt.rank() == 0 ? caf::actor_cast<worker_peer>(rt.actor)
                                    : connect_with_retry(rt, rt.opts.master.host, rt.opts.master.port, deadline,
                                                         "the master (rank 0)");
  JoinReply reply;
  {
    caf::scoped_actor self{*rt.system};
    bool answered = false;
    caf::error failure;
    self->request(master, left_until(deadline), join_atom::value, make_join_request(rt))
        .receive([&](JoinReply& r) { reply = std::move(r), answered = true; },
                 [&](caf::error& e) { failure = std::move(e); });
    if (!answered) {
      std::vector<WorkerRecord> joined;
      self->request(master, milliseconds(2000), info_atom::value)
          .receive([&](std::vector<WorkerRecord>& xs) { joined = std::move(xs); }, [](caf::error&) {});
      if (failure == caf::sec::request_timeout)
        fail_init(rt.name(), ErrorKind::Timeout,
             "timed out waiting for ranks " + missing_ranks(joined, rt.opts.world_size) + " to join (world_size " +
                 std::to_string(rt.opts.world_size) + ")");
      // N2 of Note [Launch notes]: the master went away while this worker joined.
      if (rt.rank() != 0)
        tell_launcher(kRankZeroLost, rt.opts.master.host + ":" + std::to_string(rt.opts.master.port) +
                                         ": did not answer while " + rt.name() + " joined");
      fail_init(rt.name(), ErrorKind::Unreachable, "the master did not answer: " + rt.system->render(failure));
    }
  }
  if (!reply.ok) fail_init(rt.name(), reply.timed_out ? ErrorKind::Timeout : ErrorKind::Lookup, reply.error);
  std::vector<Member> joined(size_t(rt.opts.world_size));
  for (const auto& w : reply.workers)
    if (w.rank >= 0 && w.rank < rt.opts.world_size) joined[size_t(w.rank)] = Member::from(w);
  for (size_t r = 0; r < joined.size(); ++r)
    if (joined[r].rank != WorkerId(r))
      fail_init(rt.name(), ErrorKind::Internal, "the master's list of workers has no rank " + std::to_string(r));
  publish_members(rt, std::move(joined));

  // Connect to every lower rank; higher ranks connect to us (hello).
  caf::scoped_actor self{*rt.system};
  for (WorkerId r = 0; r < rt.rank(); ++r) {
    const auto& rec = rt.world().member(r);
    auto h = r == 0 ? master : connect_with_retry(rt, rec.host, rec.port, deadline, "worker " + rec.name);
    register_peer(rt, self, r, h, rec.name, deadline);
  }
  publish_handles(rt, await_higher_ranks(rt, self, deadline));
  // From here this worker can call every peer: a call that arrives before
  // init_rpc returns here may already make nested calls.
  declare_running(rt);
  bool all_connected = false;
  self->request(master, left_until(deadline), joined_atom::value, rt.rank())
      .receive([&](bool b) { all_connected = b; }, [](caf::error&) {});
  if (!all_connected)
    fail_init(rt.name(), ErrorKind::Timeout, "timed out waiting for every worker to connect to every other one");
}

}  // namespace castor::detail
