// Handing admitted connections to CAF's BASP broker. The broker takes a
// connected scribe with the two messages CAF's own middleman actor and
// tests use: (publish, scribe, port, actor, interface) makes it the server
// side of a BASP handshake, (connect, scribe, port) the client side.
#include "actors/transport/caf_links.hpp"

#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/logger.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/type_id.hpp>

#include "actors/transport/door.hpp"
#include "actors/transport/tls_scribe.hpp"

namespace castor::detail {
namespace {

caf::actor basp_broker(caf::actor_system& sys) {
  return sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
}

caf::io::scribe_ptr make_scribe(caf::actor_system& sys, int fd, SslPtr ssl) {
  auto& mpx = static_cast<caf::io::network::default_multiplexer&>(sys.middleman().backend());
  if (ssl) return make_tls_scribe(mpx, fd, std::move(ssl));
  return mpx.new_scribe(fd);
}

}  // namespace

uint16_t serve_actor(caf::actor_system& sys, Door& door, const std::string& host, uint16_t port, bool tls,
                     caf::strong_actor_ptr whom, std::set<std::string> sigs) {
  auto basp = basp_broker(sys);
  return door.listen(host, port, true, door::Purpose::basp, tls, [&sys, basp, whom, sigs](Admitted a) {
    auto scribe = make_scribe(sys, a.fd, std::move(a.ssl));
    caf::anon_send(basp, caf::publish_atom_v, std::move(scribe), a.port, whom, sigs);
    caf::logger::set_current_actor_system(nullptr);
  });
}

ActorLink connect_actor(caf::actor_system& sys, const DialOptions& dial_opts, const std::string& host, uint16_t port,
                        const std::set<std::string>& ifs, net::Deadline deadline) {
  ActorLink out;
  auto dialed = dial(dial_opts, host, port, door::Purpose::basp, deadline);
  if (!dialed.ok()) {
    out.failure = dialed.failure;
    out.error = std::move(dialed.error);
    return out;
  }
  auto scribe = make_scribe(sys, dialed.fd, std::move(dialed.ssl));
  {
    caf::scoped_actor self{sys};
    auto left = std::chrono::milliseconds(std::max(1, net::ms_until(deadline)));
    self->request(basp_broker(sys), left, caf::connect_atom_v, std::move(scribe), port)
        .receive(
            [&](caf::node_id&, caf::strong_actor_ptr& actor, std::set<std::string>& found) {
              if (!actor) {
                out.failure = DialFailure::not_castor;
                out.error = "no actor is served there";
              } else if (!sys.assignable(found, ifs)) {
                out.failure = DialFailure::refused;
                out.error = "the actor served there is not a castor worker of this build";
              } else {
                out.actor = std::move(actor);
              }
            },
            [&](caf::error& e) {
              out.failure = e == caf::sec::request_timeout ? DialFailure::timeout : DialFailure::unreachable;
              out.error = "no BASP handshake: " + sys.render(e);
            });
  }
  caf::logger::set_current_actor_system(nullptr);
  return out;
}

}  // namespace castor::detail
