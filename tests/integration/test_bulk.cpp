// The bulk path (Note [Bulk path] in actors/transport/bulk/bulk_path.cpp): large tensors
// between real workers on loopback, both ways, checked value for value, and
// the link's behaviour with bad input.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <openssl/ssl.h>

#include <nlohmann/json.hpp>

#include "actors/observe/inspection.hpp"
#include "actors/transport/bulk/bulk_frame.hpp"
#include "actors/transport/bulk/bulk_path.hpp"
#include "actors/transport/bulk/bulk_stream.hpp"
#include "actors/transport/bulk/same_host.hpp"
#include "actors/transport/bulk/shared_segments.hpp"
#include "actors/api/shared_memory.hpp"
#include "actors/transport/dialer.hpp"
#include "actors/transport/sockets.hpp"
#include "actors/transport/tls_session.hpp"
#include "messages/autograd_proto.hpp"
#include "messages/rendezvous.hpp"
#include "messages/rref_proto.hpp"
#include "actors/api/worker_access.hpp"
#include "actors/hooks/worker_services.hpp"
#include "actors/runtime/testing.hpp"
#include "engine/context.hpp"
#include "rref/rref.hpp"
#include "support/arrival_log.hpp"
#include "support/certs.hpp"
#include "support/errors.hpp"
#include "support/cluster.hpp"
#include "support/test_functions.hpp"

using namespace castor;
using namespace castor::test;
using std::chrono::milliseconds;

namespace {

uint64_t bulk_sent(Worker& w) { return castor::testing::runtime(w).stats.bulk_sent.load(); }
uint64_t bulk_received(Worker& w) { return castor::testing::runtime(w).stats.bulk_received.load(); }
uint64_t lane_sent(Worker& w) { return castor::testing::runtime(w).stats.lane_sent.load(); }
uint64_t lane_received(Worker& w) { return castor::testing::runtime(w).stats.lane_received.load(); }

using castor::detail::MessageType;
uint64_t handled(Worker& w, MessageType t) { return castor::testing::runtime(w).stats.received[size_t(t)].load(); }

// What `w` handled of the kinds a lane carries: calls and replies (B8) and
// protocol messages (B10), whichever way they came.
uint64_t handled_lane_kinds(Worker& w) {
  uint64_t n = 0;
  for (auto t : {MessageType::call_request, MessageType::call_reply, MessageType::rref_control, MessageType::rref_ack,
                 MessageType::backward_grad, MessageType::backward_done, MessageType::context_control})
    n += handled(w, t);
  return n;
}


// The options of a two-worker world in a TLS cluster (B6) when `tls`, its
// certificates made under `tag`; none (plain) otherwise.
std::function<void(WorkerOptions&)> tls_if(bool tls, const std::string& tag) {
  if (!tls) return {};
  auto certs = make_certs(tag, {"worker0", "worker1"});
  return [certs](WorkerOptions& o) { o.tls = tls_files(certs, o.name); };
}

// worker0 in this process and worker1 in a child (B7 and B14 are between
// processes), in a TLS cluster with certificates made under `tag` when `tls`.
struct ChildPair {
  ChildPair(bool tls, const std::string& tag) {
    auto certs = tls ? make_certs(tag, {"worker0", "worker1"}) : std::string();
    auto port = free_port();
    {
      std::optional<ChildTls> child_tls;
      if (tls) child_tls.emplace(certs, false);
      child.emplace(1, 2, port);  // serves until worker0 shuts down
    }
    auto o = local_options(0, 2, port);
    if (tls) o.tls = tls_files(certs, "worker0");
    w.emplace(init_rpc(o));
  }
  std::optional<ChildWorker> child;
  std::optional<Worker> w;
};

// A link's writer thread counts a send after the receiver's answer, which on
// one host can come after the call's reply has arrived: counters are checked
// once they settle (castor::test::eventually), not at the instant the call
// returns.

// A stranger that passed worker1's door and greets as worker0's link (the
// greeting's rank is checked against the world only: B3). Its socket, blocking.
int greet_as_worker0(LocalWorld& world) {
  namespace bulk = castor::detail::bulk;
  castor::detail::DialOptions opts;
  opts.wire_version = uint16_t(castor::kWireProtocolVersion);
  auto d = castor::detail::dial(opts, "127.0.0.1", castor::testing::runtime(world[1]).bulk->port(),
                                castor::detail::door::Purpose::bulk,
                                castor::detail::net::Clock::now() + std::chrono::seconds(5));
  REQUIRE(d.ok());
  castor::detail::net::set_nonblocking(d.fd, false);
  timeval limit{10, 0};
  ::setsockopt(d.fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  std::vector<char> hello;
  bulk::put(hello, bulk::kMagic);
  bulk::put(hello, int32_t(0));
  bulk::put(hello, uint32_t(castor::kWireProtocolVersion));
  bulk::put(hello, int32_t(0));   // pid: none
  bulk::put(hello, uint32_t(0));  // host identity: none
  bulk::put(hello, uint32_t(1));  // life 1 of worker0, as the world knows it
  REQUIRE(::send(d.fd, hello.data(), hello.size(), MSG_NOSIGNAL) == ssize_t(hello.size()));
  char answer = 0;
  REQUIRE(::recv(d.fd, &answer, 1, 0) == 1);
  CHECK(answer == bulk::kOtherHost);
  return d.fd;
}

// Threads of this process named `name` (B11 names the bulk path's).
int threads_named(const std::string& name) {
  int n = 0;
  for (auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    if (std::getline(comm, line) && line == name) ++n;
  }
  return n;
}

// worker1 finds worker0's bulk port at a listener of the test's that takes
// the connection and never greets: worker1's dial of its link to worker0
// waits there until the dial's deadline (kDialSeconds), then closes it
// (unless worker1 ends first). `dialed` once it came, `dial_over` once it
// ended, and when; every wait is bounded.
struct SilentBulkPort {
  static constexpr auto kDialSeconds = std::chrono::seconds(3);  // BulkPath::open's deadline
  int listener = -1;
  std::atomic<bool> dialed{false}, dial_over{false};
  std::chrono::steady_clock::time_point dialed_at, over_at;  // written before their flags
  std::thread watch;

  explicit SilentBulkPort(LocalWorld& world) {
    listener = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(listener >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(listener, 4) == 0);
    REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    castor::testing::runtime(world[1]).membership.update([&](const castor::detail::World& w) {
      auto members = w.members();
      members[0].bulk_port = ntohs(addr.sin_port);
      return w.with_members(std::move(members));
    });
    watch = std::thread([this] {
      pollfd p{listener, POLLIN, 0};
      if (::poll(&p, 1, 30000) != 1) return;
      int c = ::accept(listener, nullptr, nullptr);
      dialed_at = std::chrono::steady_clock::now();
      dialed = true;
      char byte;
      p = pollfd{c, POLLIN, 0};  // the dialer sends nothing before the door's greeting: what ends is the dial
      if (::poll(&p, 1, 30000) == 1) (void)::recv(c, &byte, 1, 0);
      over_at = std::chrono::steady_clock::now();
      dial_over = true;
      ::close(c);
    });
  }
  void join() {
    if (watch.joinable()) watch.join();
  }
  // Whether the dial ended before its deadline could end it: cut by its
  // worker. (The deadline counts from just before the connection that
  // `dialed_at` saw; the margin is for the clocks of two threads.)
  bool cut_short() {
    join();
    return dial_over && over_at - dialed_at < kDialSeconds - std::chrono::milliseconds(300);
  }
  ~SilentBulkPort() {  // also when a REQUIRE ends the test
    join();
    if (listener >= 0) ::close(listener);
  }
};

}  // namespace

TEST_CASE("large tensors take the bulk path both ways, small ones ride the same link as its lane (B8)") {
  // Both workers in this process: the bytes go on the socket (B7 copies only
  // from another process), plain and in a TLS cluster (B6).
  bool tls = false;
  SUBCASE("plain") { tls = false; }
  SUBCASE("TLS") { tls = true; }
  CAPTURE(tls);
  LocalWorld world(2, tls_if(tls, "bulk"));
  REQUIRE(castor::testing::runtime(world[0]).bulk != nullptr);
  auto big = at::rand({600, 600});            // 1.4 MB
  auto strided = at::rand({700, 400}).t();    // non-contiguous
  auto ints = at::arange(int64_t(300000));    // 2.4 MB of int64
  auto flags = at::rand({1 << 19}) > 0.5;     // 512 KiB of bool
  auto small = at::rand({600});              // 2.4 KB: inside the message

  CHECK(at::equal(world[0].rpc_sync<at::Tensor>("worker1", "identity", big), big));
  CHECK(at::equal(world[0].rpc_sync<at::Tensor>("worker1", "identity", strided), strided));
  CHECK(at::equal(world[1].rpc_sync<at::Tensor>("worker0", "identity", ints), ints));
  CHECK(at::equal(world[0].rpc_sync<at::Tensor>("worker1", "identity", flags), flags));
  CHECK(at::allclose(world[0].rpc_sync<at::Tensor>("worker1", "my_add", big, small), big + small));
  auto parts = world[0].rpc_sync<std::vector<at::Tensor>>("worker1", "aten::split", big, 100);
  REQUIRE(parts.size() == 6);
  CHECK(at::equal(parts[5], big.narrow(0, 500, 100)));
  // worker0 sent 5 requests with a large tensor (one of them came back as 6
  // small parts, a reply on CAF's link); worker1 sent one request and 4 large replies.
  CHECK(eventually([&] { return bulk_sent(world[0]) == 5 + 1; }));
  CHECK(bulk_received(world[1]) == 5 + 1);
  CHECK(eventually([&] { return bulk_received(world[0]) == bulk_sent(world[1]); }));

  // The split's reply (6 small parts) and every small message since the
  // links opened: frames without large tensors (B8).
  CHECK(eventually([&] { return lane_received(world[0]) >= 1; }));
  auto before = bulk_sent(world[0]);
  auto lane_before = lane_sent(world[0]);
  CHECK(at::equal(world[0].rpc_sync<at::Tensor>("worker1", "identity", small), small));
  CHECK(bulk_sent(world[0]) == before);
  CHECK(lane_sent(world[0]) == lane_before + 1);
  world.shutdown_all();
  CHECK_FALSE(world.leaked());
}

TEST_CASE("between processes on one host, large tensors are copied from the peer's memory (B7), plain and TLS") {
  bool tls = false;
  SUBCASE("plain") { tls = false; }
  SUBCASE("TLS: the addresses and answers inside the session") { tls = true; }
  CAPTURE(tls);
  ChildPair pair(tls, "bulk-b7");
  auto& w = *pair.w;
  auto big = at::rand({600, 600});
  auto strided = at::rand({700, 400}).t();
  auto ints = at::arange(int64_t(3) << 20);  // 24 MiB: B7 splits it across two threads
  CHECK(at::equal(w.rpc_sync<at::Tensor>("worker1", "identity", big), big));
  CHECK(at::equal(w.rpc_sync<at::Tensor>("worker1", "identity", strided), strided));
  auto back = w.rpc_sync<at::Tensor>("worker1", "identity", ints);
  CHECK(at::equal(back, ints));
  // A received block of a huge page or more starts on a huge page's
  // boundary (ReceiveBlocks::allocate: it asks for huge pages there).
  CHECK(reinterpret_cast<uintptr_t>(back.data_ptr()) % (uintptr_t(2) << 20) == 0);
  CHECK(eventually([&] { return bulk_sent(w) == 3; }));
  CHECK(bulk_received(w) == 3);  // the replies, on worker1's own link
  w.shutdown();
  CHECK(pair.child->wait_exit(milliseconds(30000)) == 0);
}

// Note [Shared tensors] in actors/transport/bulk/shared_segments.cpp.
TEST_CASE("a shared tensor reaches a worker on its host as a view of the same memory, whatever its size, and other tensors as copies (SH1-SH5), plain and TLS") {
  namespace bulk = castor::detail::bulk;
  bool tls = false;
  SUBCASE("plain") { tls = false; }
  SUBCASE("TLS") { tls = true; }
  CAPTURE(tls);
  ChildPair pair(tls, "bulk-shared");
  auto& w = *pair.w;
  const auto segments_before = bulk::shared_segments_alive();
  const auto sent_before = bulk_sent(w);
  {
    auto small = castor::share_memory(at::zeros({1000}));  // 4 KB: below bulk_threshold
    auto large = at::zeros({300000});
    auto view_before = large.slice(0, 0, 10);  // made before the move: it follows (SH1)
    castor::share_memory(large);
    auto plain = at::zeros({300000});
    CHECK(castor::is_shared(small));
    CHECK(castor::is_shared(large));
    CHECK(castor::is_shared(view_before));
    CHECK_FALSE(castor::is_shared(plain));
    CHECK(bulk::shared_segments_alive() == segments_before + 2);

    auto& stats = castor::testing::runtime(w).stats;
    const auto unanswered_before = stats.views_unanswered.load();
    CHECK(w.rpc_sync<bool>("worker1", "arrived_shared", small));
    CHECK(w.rpc_sync<bool>("worker1", "arrived_shared", large));
    CHECK_FALSE(w.rpc_sync<bool>("worker1", "arrived_shared", plain));
    // The first frame of a segment waits for worker1's answer (SH3); it
    // said it mapped both, so the frames that follow with them wait for
    // none (SH7).
    CHECK(stats.views_unanswered.load() == unanswered_before);
    // What the callee writes into a shared argument, the caller reads.
    CHECK(w.rpc_sync<double>("worker1", "fill_in_place", large, 2.0) == 600000.0);
    CHECK(large.sum().item<double>() == 600000.0);
    CHECK(view_before.sum().item<double>() == 20.0);
    CHECK(w.rpc_sync<double>("worker1", "fill_in_place", small, 3.0) == 3000.0);
    CHECK(small.sum().item<double>() == 3000.0);
    // A plain tensor stays a value.
    CHECK(w.rpc_sync<double>("worker1", "fill_in_place", plain, 2.0) == 600000.0);
    CHECK(plain.sum().item<double>() == 0.0);
    // A contiguous slice is a view of its part of the segment; a transposed
    // view is not contiguous, so it travels as a copy.
    auto part = large.slice(0, 1000, 2000);
    CHECK(w.rpc_sync<bool>("worker1", "arrived_shared", part));
    CHECK(w.rpc_sync<double>("worker1", "fill_in_place", part, 5.0) == 5000.0);
    CHECK(large.sum().item<double>() == 600000.0 + 3000.0);
    auto grid = castor::share_memory(at::zeros({300, 400}));
    auto transposed = grid.t();
    CHECK_FALSE(w.rpc_sync<bool>("worker1", "arrived_shared", transposed));
    CHECK(w.rpc_sync<double>("worker1", "fill_in_place", transposed, 1.0) == 120000.0);
    CHECK(grid.sum().item<double>() == 0.0);

    // The callee's own shared tensor comes back as a view of its memory...
    auto theirs = w.rpc_sync<at::Tensor>("worker1", "share_kept", int64_t(200000));
    CHECK(castor::is_shared(theirs));
    CHECK(w.rpc_sync<bool>("worker1", "add_to_kept", 7.0));
    CHECK(theirs.sum().item<double>() == 7.0 * 200000);
    // ...and what this side writes, the callee reads.
    theirs.fill_(1.0);
    CHECK(w.rpc_sync<double>("worker1", "kept_sum") == 200000.0);
    // A view the callee keeps of this side's tensor reads this side's writes.
    CHECK(w.rpc_sync<bool>("worker1", "keep_tensor", small));
    small.fill_(4.0);
    CHECK(w.rpc_sync<double>("worker1", "kept_sum") == 4000.0);

    // User code that throws: the error arrives whole, naming the function,
    // and what it wrote before is in this side's tensor (SH6: no rollback).
    auto e = error_of<RemoteError>([&] { w.rpc_sync<bool>("worker1", "fill_then_throw", large, 9.0); });
    CHECK(contains(e, "fill_then_throw: filled 300000 elements, then failed"));
    CHECK(contains(e, "worker1"));
    CHECK(large.sum().item<double>() == 9.0 * 300000);
    // The same-host link carried the 12 calls with tensors (B7, SH3), the
    // small shared one too (SH2): none fell back to CAF.
    CHECK(eventually([&] { return bulk_sent(w) == sent_before + 12; }));
    // Of them, these went without an answer (SH7): `large` filled twice, its
    // slice twice, `small` filled and kept.
    CHECK(eventually([&] { return stats.views_unanswered.load() == unanswered_before + 6; }));
  }
  // The program ends while the callee still keeps a view of this side's
  // tensor: both sides end cleanly, this side's segments went with its
  // tensors, and the one mapped from worker1 (kept for the next message
  // while the link lived: SH4) is let go of as the worker stops.
  w.shutdown();
  CHECK(pair.child->wait_exit(milliseconds(30000)) == 0);
  CHECK(bulk::shared_segments_alive() == segments_before);
}

TEST_CASE("a frame of views needs no answer once its segments are mapped, a link keeps 64 segments at most, the least recently named go, and all go when the peer is SIGKILLed (SH7)") {
  namespace bulk = castor::detail::bulk;
  ChildPair pair(false, "bulk-views-unanswered");
  auto& w = *pair.w;
  auto& stats = castor::testing::runtime(w).stats;
  const auto segments_before = bulk::shared_segments_alive();
  const auto unanswered_before = stats.views_unanswered.load();
  std::vector<at::Tensor> many;
  for (int i = 0; i < 70; ++i) many.push_back(castor::share_memory(at::full({256}, float(i))));
  // Each new segment's frame waits for worker1's answer, which says it mapped it.
  for (auto& t : many) REQUIRE(w.rpc_sync<bool>("worker1", "arrived_shared", t));
  CHECK(stats.views_unanswered.load() == unanswered_before);
  // The last 64 are kept for worker1: frames of them need no answer; the
  // first six were let go of (the least recently named), so theirs waits
  // again, and the values are right either way.
  CHECK(w.rpc_sync<double>("worker1", "fill_in_place", many[69], 2.0) == 512.0);
  CHECK(eventually([&] { return stats.views_unanswered.load() == unanswered_before + 1; }));
  CHECK(w.rpc_sync<double>("worker1", "fill_in_place", many[0], 3.0) == 768.0);
  CHECK(stats.views_unanswered.load() == unanswered_before + 1);
  CHECK(many[0].sum().item<double>() == 768.0);
  CHECK(many[69].sum().item<double>() == 512.0);
  CHECK(w.rpc_sync<double>("worker1", "fill_in_place", many[0], 4.0) == 1024.0);  // kept again since its answer
  CHECK(eventually([&] { return stats.views_unanswered.load() == unanswered_before + 2; }));
  // What this side dropped, the link still keeps (worker1 may have to map
  // it again), up to its bound.
  many.clear();
  CHECK(bulk::shared_segments_alive() == segments_before + 64);
  // worker1 is SIGKILLed: its link ends, and with it what was kept for it.
  pair.child->kill();
  CHECK(pair.child->wait_exit(milliseconds(10000)) == 128 + SIGKILL);
  auto e = error_of<UnreachableError>([&] { w.rpc_sync<double>("worker1", "kept_sum"); });
  CHECK(contains(e, "worker worker1 is unreachable"));
  CHECK(eventually([&] { return bulk::shared_segments_alive() == segments_before; }));
  w.shutdown(false);
}

TEST_CASE("a view of a shared tensor outlives its owner: the owner SIGKILLed, the bytes stay readable and a call names the dead worker (SH1)") {
  ChildPair pair(false, "bulk-shared-kill");
  auto& w = *pair.w;
  auto theirs = w.rpc_sync<at::Tensor>("worker1", "share_kept", int64_t(100000));
  REQUIRE(castor::is_shared(theirs));
  CHECK(w.rpc_sync<bool>("worker1", "add_to_kept", 3.0));
  pair.child->kill();
  CHECK(pair.child->wait_exit(milliseconds(10000)) == 128 + SIGKILL);
  CHECK(theirs.sum().item<double>() == 300000.0);
  theirs.add_(1.0);  // still writable: the memory is this process's too now
  CHECK(theirs.sum().item<double>() == 400000.0);
  auto e = error_of<UnreachableError>([&] { w.rpc_sync<double>("worker1", "kept_sum"); });
  CHECK(contains(e, "worker worker1 is unreachable"));
  // The dead owner's link ended: its segment is no longer kept for a next
  // message, only by the view (SH4).
  const auto alive = castor::detail::bulk::shared_segments_alive();
  theirs = at::Tensor();
  CHECK(eventually([&] { return castor::detail::bulk::shared_segments_alive() == alive - 1; }));
  w.shutdown(false);
}

TEST_CASE("a same-host frame's head leaves from the sending thread and the writer reads the answer, values whole and in order (B14), plain and TLS") {
  bool tls = false;
  SUBCASE("plain") { tls = false; }
  SUBCASE("TLS: the session passes from the sender to the writer") { tls = true; }
  CAPTURE(tls);
  ChildPair pair(tls, "bulk-b14");
  auto& w = *pair.w;
  auto& stats = castor::testing::runtime(w).stats;
  // The first large call opens the link (it waits for the dial); the link
  // is idle again once its frame counts as sent (after the answer).
  auto warm = at::rand({int64_t(1) << 18});
  CHECK(at::equal(w.rpc_sync<at::Tensor>("worker1", "identity", warm), warm));
  REQUIRE(eventually([&] { return stats.bulk_sent.load() == 1; }));
  const auto heads = stats.heads_by_sender.load();
  // One call from this thread on an idle link: its head leaves from here,
  // at once (the answer is the writer's).
  auto first = at::rand({int64_t(1) << 18});
  CHECK(at::equal(w.rpc_sync<at::Tensor>("worker1", "identity", first), first));
  CHECK(stats.heads_by_sender.load() == heads + 1);
  // Sizes from 256 KiB to 4 MiB, each waited for: heads from this thread
  // and from worker1's executor whenever the writer has read the last
  // answer, else through the writer.
  for (int64_t i = 0; i < 12; ++i) {
    auto t = at::full({(int64_t(1) << 16) << (i % 5)}, float(i));
    CHECK(at::equal(w.rpc_sync<at::Tensor>("worker1", "identity", t), t));
  }
  // One large call on an idle link, then a stream of them (B13: through
  // the writer) and small ones between: they arrive in the order sent.
  auto log = w.remote<ArrivalLog>("worker1");
  CHECK(log.rpc_sync(&ArrivalLog::record, int64_t(0), at::full({int64_t(1) << 17}, 0.f)) == 1);
  std::vector<Future<int64_t>> calls;
  std::vector<int64_t> expected{0};
  for (int64_t i = 1; i <= 30; ++i) {
    expected.push_back(i);
    auto size = i % 3 == 0 ? int64_t(4) : int64_t(1) << 17;
    calls.push_back(log.rpc_async(&ArrivalLog::record, i, at::full({size}, float(i))));
  }
  for (auto& f : calls) CHECK(f.wait(milliseconds(30000)) >= 1);
  CHECK(log.rpc_sync(&ArrivalLog::arrivals) == expected);
  CHECK(eventually([&] { return stats.bulk_sent.load() == 1 + 1 + 12 + 1 + 20; }));
  CHECK(stats.bulk_received.load() == 1 + 1 + 12);  // worker1's replies, whole (checked above)
  CHECK(stats.heads_by_sender.load() > heads + 1);
  // castor inspect shows the count.
  auto snap = nlohmann::json::parse(castor::detail::inspection_json(castor::testing::runtime(w)));
  CHECK(snap["bulk"]["heads_written_by_sender"].get<uint64_t>() == stats.heads_by_sender.load());
  log = RRef<ArrivalLog>();
  w.shutdown();
  CHECK(pair.child->wait_exit(milliseconds(30000)) == 0);
}

// B15: worker1 is frozen with a frame's head (the tensors' addresses) in
// its socket, so that its copy comes after what the test does meanwhile.
TEST_CASE("a same-host copy that its sender revoked is never delivered: a live link sends the bytes instead, a broken one nothing, and the caller's reused tensor is not read (B15), plain and TLS") {
  namespace bulk = castor::detail::bulk;
  bool tls = false;
  SUBCASE("plain") { tls = false; }
  SUBCASE("TLS") { tls = true; }
  CAPTURE(tls);
  ChildPair pair(tls, "bulk-b15");
  auto& w = *pair.w;
  auto& stats = castor::testing::runtime(w).stats;
  const int child = pair.child->pid();
  // A REQUIRE that ends the test with worker1 frozen thaws it on the way
  // out, so that the shutdown does not wait out a stopped peer.
  struct Thaw {
    int pid;
    ~Thaw() { ::kill(pid, SIGCONT); }
  } thaw{child};
  auto warm = at::rand({int64_t(1) << 18});
  CHECK(at::equal(w.rpc_sync<at::Tensor>("worker1", "identity", warm), warm));
  REQUIRE(eventually([&] { return stats.bulk_sent.load() == 1; }));  // the link is idle again
  // Idle once its writer counted `bulk` frames and `lane` small calls after
  // `warm`: a writer counts a frame once it has let go of the link, which
  // can be after the call's reply came (a loaded machine, CI's -j2).
  const auto lane_before = stats.lane_sent.load();
  auto idle = [&](uint64_t bulk, uint64_t lane) {
    return eventually([&] { return stats.bulk_sent.load() == bulk && stats.lane_sent.load() == lane_before + lane; });
  };

  // A revocation while the link stays up (another link of this process
  // broke): worker1 finds its copy revoked and takes the bytes instead.
  REQUIRE(pair.child->freeze());
  auto heads = stats.heads_by_sender.load();
  auto first = at::full({int64_t(1) << 20}, 3.f);
  auto echo = w.rpc_async<at::Tensor>("worker1", "identity", first);
  REQUIRE(stats.heads_by_sender.load() == heads + 1);  // B14: the head left from here, at once
  bulk::revoke_copies();
  ::kill(child, SIGCONT);
  CHECK(at::equal(echo.wait(milliseconds(30000)), first));
  CHECK(w.rpc_sync<int64_t>("worker1", "copies_revoked_here") == 1);
  // The link is still same-host: the next head leaves from here too, and its copy holds.
  REQUIRE(idle(2, 1));
  heads = stats.heads_by_sender.load();
  auto second = at::full({int64_t(1) << 20}, 4.f);
  CHECK(at::equal(w.rpc_sync<at::Tensor>("worker1", "identity", second), second));
  CHECK(stats.heads_by_sender.load() == heads + 1);
  CHECK(w.rpc_sync<int64_t>("worker1", "copies_revoked_here") == 1);

  // A frame of views (SH4 of Note [Shared tensors]) revoked the same way:
  // its bytes come after all, into worker1's own memory, not its view.
  REQUIRE(idle(3, 2));
  auto shared = castor::share_memory(at::full({int64_t(1) << 20}, 5.f));
  REQUIRE(pair.child->freeze());
  heads = stats.heads_by_sender.load();
  auto view_echo = w.rpc_async<bool>("worker1", "arrived_shared", shared);
  REQUIRE(stats.heads_by_sender.load() == heads + 1);  // the head left before the revocation
  bulk::revoke_copies();
  ::kill(child, SIGCONT);
  CHECK_FALSE(view_echo.wait(milliseconds(30000)));
  CHECK(w.rpc_sync<int64_t>("worker1", "copies_revoked_here") == 2);
  CHECK(w.rpc_sync<bool>("worker1", "arrived_shared", shared));  // the next one is a view again
  CHECK(w.rpc_sync<int64_t>("worker1", "copies_revoked_here") == 2);

  // The link breaks while worker1 has not copied yet: the call fails, the
  // caller writes into its tensor, and worker1, copying after that, must
  // not run the call on what it finds.
  REQUIRE(idle(5, 4));
  REQUIRE(pair.child->freeze());
  const auto revocations = bulk::revocations_so_far();
  heads = stats.heads_by_sender.load();
  auto ones = at::ones({int64_t(1) << 20});
  auto call = w.rpc_async<bool>("worker1", "remember_sum", ones);
  REQUIRE(stats.heads_by_sender.load() == heads + 1);
  castor::testing::runtime(w).bulk->peer_down(1);
  auto failed = error_of([&] { call.wait(milliseconds(10000)); });
  CHECK(contains(failed, "the bulk link to worker worker1 broke"));
  CHECK(bulk::revocations_so_far() == revocations + 1);  // before the caller heard of it
  ones.fill_(7.f);  // the call failed: the tensor is the caller's again
  ::kill(child, SIGCONT);
  CHECK(eventually([&] { return w.rpc_sync<int64_t>("worker1", "copies_revoked_here") == 3; }, milliseconds(10000)));
  CHECK(w.rpc_sync<int64_t>("worker1", "remembered_sum") == 0);
  // worker1 serves on (through CAF: the broken link is not used again).
  CHECK(w.rpc_sync<bool>("worker1", "remember_sum", ones));
  CHECK(w.rpc_sync<int64_t>("worker1", "remembered_sum") == int64_t(7) << 20);
  auto snap = nlohmann::json::parse(castor::detail::inspection_json(castor::testing::runtime(w)));
  CHECK(snap["bulk"]["copies_revoked"].get<uint64_t>() == 0);  // worker0 copied nothing revoked
  w.shutdown();
  CHECK(pair.child->wait_exit(milliseconds(30000)) == 0);
}

TEST_CASE("a TLS bulk stream: every size around a record's (16 KiB) and a send's (256 KiB) edge arrives whole and in order, a key update is answered, and a write to a closed peer fails without SIGPIPE (B6)") {
  namespace net = castor::detail::net;
  using castor::detail::bulk::Stream;
  auto certs = make_certs("bulk-stream", {"worker0", "worker1"});
  castor::detail::TlsContext sender_tls(tls_files(certs, "worker0")), receiver_tls(tls_files(certs, "worker1"));
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  auto sending = sender_tls.session(fds[0], false);
  auto receiving = receiver_tls.session(fds[1], true);
  // Both sides verify the other (T1); the handshake needs both at once.
  for (int fd : fds) net::set_nonblocking(fd, true);
  std::string why_sender, why_receiver;
  auto deadline = net::Clock::now() + std::chrono::seconds(20);
  bool receiver_ok = false;
  std::thread accepting(
      [&] { receiver_ok = castor::detail::tls_handshake(receiving.get(), fds[1], deadline, why_receiver); });
  bool sender_ok = castor::detail::tls_handshake(sending.get(), fds[0], deadline, why_sender);
  accepting.join();
  REQUIRE_MESSAGE(sender_ok, why_sender);
  REQUIRE_MESSAGE(receiver_ok, why_receiver);
  // Every wait below is bounded: a read or write that waits 20 s fails.
  timeval limit{20, 0};
  for (int fd : fds) {
    net::set_nonblocking(fd, false);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  }
  SSL* receiver_session = receiving.get();
  SSL* sender_session = sending.get();
  Stream out(fds[0], std::move(sending));
  auto in = std::make_unique<Stream>(fds[1], std::move(receiving));

  // Records hold 16 KiB, one send carries the records of 256 KiB: sizes on
  // both edges, and one of several sends that ends mid-record.
  const size_t kib = 1024;
  const std::vector<size_t> sizes{1, 16 * kib - 1, 16 * kib, 16 * kib + 1, 256 * kib - 1, 256 * kib, 256 * kib + 1,
                                  3 * 256 * kib + 7, (size_t(8) << 20) + 3, 5};
  auto pattern = [](size_t message, size_t i) { return char((message * 131 + i * 7 + i / 4099) & 0xff); };
  std::thread writing([&] {
    for (size_t m = 0; m < sizes.size(); ++m) {
      std::vector<char> bytes(sizes[m]);
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = pattern(m, i);
      if (!out.write_all(bytes.data(), bytes.size())) return;
    }
  });
  size_t whole = 0;
  for (size_t m = 0; m < sizes.size(); ++m) {
    std::vector<char> got(sizes[m]);
    if (!in->read_all(got.data(), got.size())) break;
    size_t wrong = 0;
    for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != pattern(m, i);
    CHECK_MESSAGE(wrong == 0, "message ", m, " of ", sizes[m], " bytes: ", wrong, " bytes wrong");
    ++whole;
  }
  writing.join();
  CHECK(whole == sizes.size());

  // The receiver asks for a key update with its answer: the sender's session
  // answers with its own in front of its next write's records (so the stream
  // sends records it did not make in that write), which are read whole. (How
  // the count of sends per message stays low is the bench's to show: strace
  // in bench/README.md.)
  REQUIRE(SSL_key_update(receiver_session, SSL_KEY_UPDATE_REQUESTED) == 1);
  char answer = 'a', got_answer = 0;
  REQUIRE(in->write_all(&answer, 1));
  REQUIRE(out.read_all(&got_answer, 1));
  CHECK(got_answer == 'a');
  std::vector<char> after(300 * kib);
  for (size_t i = 0; i < after.size(); ++i) after[i] = pattern(99, i);
  std::thread writing_after([&] { (void)out.write_all(after.data(), after.size()); });
  std::vector<char> got_after(after.size());
  bool read_after = in->read_all(got_after.data(), got_after.size());
  writing_after.join();
  CHECK(read_after);
  CHECK(got_after == after);  // a lost answer would have broken the decryption
  CHECK(SSL_get_key_update_type(receiver_session) == SSL_KEY_UPDATE_NONE);  // the request went out
  CHECK(SSL_get_key_update_type(sender_session) == SSL_KEY_UPDATE_NONE);    // and the answer too

  // T7: the peer went away. A write fails (its records are made, their send
  // fails), and no SIGPIPE is raised: with the default action, one would end
  // this process.
  in.reset();
  ::close(fds[1]);
  auto previous = ::signal(SIGPIPE, SIG_DFL);
  std::vector<char> more(size_t(1) << 20, 'x');
  bool sent = out.write_all(more.data(), more.size());
  ::signal(SIGPIPE, previous);
  CHECK_FALSE(sent);
  ::close(fds[0]);
}

TEST_CASE("one bulk link keeps its messages in the order they were sent (B3), plain and TLS") {
  bool tls = false;
  SUBCASE("plain") { tls = false; }
  SUBCASE("TLS") { tls = true; }
  CAPTURE(tls);
  LocalWorld world(2, tls_if(tls, "bulk-order"));
  auto log = world[0].remote<ArrivalLog>("worker1");
  // Sizes from 512 KiB to 8 MiB in turn, and every third message small (B8:
  // written by the calling thread when the link is idle, else queued behind
  // the large ones): a later small message would overtake an earlier large
  // one on any lane that did not keep order.
  const int64_t n = 60;
  int64_t large = 0;
  std::vector<Future<int64_t>> calls;
  for (int64_t i = 0; i < n; ++i) {
    bool small = i % 3 == 2;
    large += small ? 0 : 1;
    auto size = small ? int64_t(16) : (int64_t(1) << 17) << (i % 5);
    calls.push_back(log.rpc_async(&ArrivalLog::record, i, at::full({size}, float(i))));
  }
  for (auto& f : calls) CHECK(f.wait(milliseconds(30000)) >= 1);
  std::vector<int64_t> expected(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) expected[size_t(i)] = i;
  CHECK(log.rpc_sync(&ArrivalLog::arrivals) == expected);
  CHECK(eventually([&] { return bulk_sent(world[0]) == uint64_t(large); }));
  // Counted after the write, which the reply to the last call can overtake.
  CHECK(eventually([&] { return lane_sent(world[0]) >= uint64_t(n - large); }));
  log = RRef<ArrivalLog>();
  world.shutdown_all();
  CHECK_FALSE(world.leaked());
}

TEST_CASE("small messages queued behind a large one leave in batches and arrive in order, the payload intact (B9), plain and TLS") {
  bool tls = false;
  SUBCASE("plain") { tls = false; }
  SUBCASE("TLS") { tls = true; }
  CAPTURE(tls);
  LocalWorld world(2, tls_if(tls, "bulk-batch"));
  auto log = world[0].remote<ArrivalLog>("worker1");
  // The link is open once a large message went: it waits for the link.
  CHECK(log.rpc_sync(&ArrivalLog::record, int64_t(0), at::full({int64_t(1) << 17}, 0.f)) == 1);
  // A 32 MiB tensor keeps the link's writer busy while 300 small calls
  // queue behind it: the writer sends them up to 64 at a time, and the
  // receiver reads them several to a recv. Then large and small in turn, so
  // that tensor bytes follow small frames the receiver has read ahead.
  const int64_t smalls = 300;
  std::vector<Future<int64_t>> calls;
  std::vector<int64_t> expected{0};
  auto send = [&](int64_t i, at::Tensor t) {
    expected.push_back(i);
    calls.push_back(log.rpc_async(&ArrivalLog::record, i, t));
  };
  auto big = at::rand({int64_t(8) << 20});
  send(1, big);
  for (int64_t i = 2; i < 2 + smalls; ++i) send(i, at::full({4}, float(i)));
  for (int64_t i = 2 + smalls; i < 2 + smalls + 10; ++i) send(i, i % 2 ? at::full({int64_t(1) << 18}, float(i)) : at::ones({3}));
  for (auto& f : calls) CHECK(f.wait(milliseconds(30000)) >= 2);
  CHECK(log.rpc_sync(&ArrivalLog::arrivals) == expected);
  // The large tensor's bytes come back whole after all that.
  CHECK(world[0].rpc_sync<at::Tensor>("worker1", "identity", big).equal(big));
  CHECK(lane_sent(world[0]) >= uint64_t(smalls + 5));
  log = RRef<ArrivalLog>();
  world.shutdown_all();
  CHECK_FALSE(world.leaked());
}

TEST_CASE("small calls and replies ride the link once it is open, from many threads at once (B8), plain and TLS") {
  bool tls = false;
  SUBCASE("plain") { tls = false; }
  SUBCASE("TLS") { tls = true; }
  CAPTURE(tls);
  LocalWorld world(2, tls_if(tls, "bulk-lane"));
  // A small message does not wait for the link: it opens in the background
  // and the message goes through CAF meanwhile.
  auto x = at::rand({4});
  int64_t through_caf = 0;
  CHECK(eventually([&] {
    ++through_caf;
    return at::equal(world[0].rpc_sync<at::Tensor>("worker1", "identity", x), x) && lane_sent(world[0]) >= 1 &&
           lane_sent(world[1]) >= 1;
  }));
  CAPTURE(through_caf);
  auto sent = lane_sent(world[0]), received = lane_received(world[0]);
  // Callers race for the idle link: one writes, the others queue behind it.
  const int threads = 4, per_thread = 100;
  std::atomic<int> wrong{0};
  std::mutex mtx;
  std::vector<std::string> errors;
  std::vector<std::thread> callers;
  for (int t = 0; t < threads; ++t)
    callers.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        auto v = at::full({8}, float(t * 1000 + i));
        try {
          if (!at::equal(world[0].rpc_sync<at::Tensor>("worker1", "identity", v), v)) ++wrong;
        } catch (const RpcError& e) {
          std::lock_guard<std::mutex> lock(mtx);
          errors.push_back(e.what());
        }
      }
    });
  for (auto& c : callers) c.join();
  CHECK(wrong.load() == 0);
  std::string first_error = errors.empty() ? std::string() : errors.front();
  CHECK_MESSAGE(errors.empty(), first_error);
  // A writer counts its frames after it writes them: a reply can overtake that.
  CHECK(eventually([&] { return lane_sent(world[0]) - sent == uint64_t(threads * per_thread); }));
  CHECK(eventually([&] { return lane_received(world[0]) - received == uint64_t(threads * per_thread); }));
  CHECK(bulk_sent(world[0]) == 0);
  world.shutdown_all();
  CHECK_FALSE(world.leaked());
}

TEST_CASE("a thread that calls without waiting sends its calls in batches, in order, with user errors on their own calls (B12, B13), plain and TLS") {
  bool tls = false;
  SUBCASE("plain") { tls = false; }
  SUBCASE("TLS") { tls = true; }
  CAPTURE(tls);
  LocalWorld world(2, tls_if(tls, "bulk-stream"));
  REQUIRE(open_lanes(world));
  auto log = world[0].remote<ArrivalLog>("worker1");
  CHECK(log.rpc_sync(&ArrivalLog::record, int64_t(0), at::ones({1})) == 1);
  auto& stats = castor::testing::runtime(world[0]).stats;
  const uint64_t sent = stats.lane_sent.load(), writes = stats.lane_writes.load();
  // B13: each call finds the one before it still waiting for its reply, so
  // it goes to the link's writer, which sends what queued meanwhile at once.
  const int64_t n = 3000;
  std::vector<Future<int64_t>> calls;
  for (int64_t i = 1; i <= n; ++i) calls.push_back(log.rpc_async(&ArrivalLog::record, i, at::full({4}, float(i))));
  int64_t wrong = 0;
  for (int64_t i = 1; i <= n; ++i) wrong += calls[size_t(i - 1)].wait(milliseconds(30000)) == i + 1 ? 0 : 1;
  CHECK(wrong == 0);  // the object saw them in the order they were sent
  std::vector<int64_t> expected(size_t(n + 1));
  for (int64_t i = 0; i <= n; ++i) expected[size_t(i)] = i;
  CHECK(log.rpc_sync(&ArrivalLog::arrivals) == expected);
  // The writer counts a batch after writing it, and the replies can
  // overtake that count.
  CHECK(eventually([&] { return stats.lane_sent.load() - sent >= uint64_t(n); }));
  const uint64_t frames = stats.lane_sent.load() - sent, frame_writes = stats.lane_writes.load() - writes;
  CAPTURE(frames);
  CAPTURE(frame_writes);
  CHECK(frames >= uint64_t(n));
  CHECK(frame_writes < frames);  // some left together

  // User code that throws in the middle of a stream: each error comes back
  // to its own call (on CAF's link, B8) and the calls around it succeed.
  std::vector<Future<int64_t>> mixed;
  for (int64_t i = 0; i < 600; ++i)
    mixed.push_back(i % 5 == 4 ? world[0].rpc_async<int64_t>("worker1", "fail", "boom " + std::to_string(i))
                               : world[0].rpc_async<int64_t>("worker1", "add_ints", i, int64_t(1)));
  int64_t bad = 0;
  for (int64_t i = 0; i < 600; ++i) {
    auto& f = mixed[size_t(i)];
    if (i % 5 == 4) {
      auto e = error_of<RemoteError>([&] { f.wait(milliseconds(30000)); });
      bad += e == "worker worker1: function 'fail' raised: boom " + std::to_string(i) ? 0 : 1;
    } else {
      bad += f.wait(milliseconds(30000)) == i + 1 ? 0 : 1;
    }
  }
  CHECK(bad == 0);
  log = RRef<ArrivalLog>();
  world.shutdown_all();
  CHECK_FALSE(world.leaked());
}

TEST_CASE("protocol messages ride an open link: a backward pass's gradient, a context's cleanup, an RRef's delete and ack (B10), plain and TLS") {
  bool tls = false;
  SUBCASE("plain") { tls = false; }
  SUBCASE("TLS") { tls = true; }
  CAPTURE(tls);
  LocalWorld world(2, tls_if(tls, "bulk-protocol"));
  REQUIRE(open_lanes(world));
  const uint64_t lane0 = lane_received(world[0]), lane1 = lane_received(world[1]);
  const uint64_t kinds0 = handled_lane_kinds(world[0]), kinds1 = handled_lane_kinds(world[1]);
  const uint64_t grads1 = handled(world[1], MessageType::backward_grad);
  const uint64_t cleanup1 = handled(world[1], MessageType::context_control);
  const uint64_t control0 = handled(world[0], MessageType::rref_control);
  const uint64_t acks1 = handled(world[1], MessageType::rref_ack);

  auto a = at::rand({3}).set_requires_grad(true);
  {
    autograd::Context ctx(world[0]);
    auto c = world[0].rpc_sync<at::Tensor>("worker1", "my_add", a, a);
    ctx.backward({(c * c).sum()});
    CHECK(at::allclose(ctx.gradients().at(a), 8 * a.detach()));  // d/da (2a)^2
  }  // the context ends here, and with it worker1's part (a cleanup)
  auto t = at::arange(4, at::kFloat);
  {
    auto r = world[0].make_rref(t);
    // worker1 holds a fork while its call runs; dropping it deletes the
    // fork at the owner (a control message), which acknowledges it.
    CHECK(at::equal(world[0].rpc_sync<at::Tensor>("worker1", "rref_sum", r), t.sum()));
  }
  CHECK(eventually([&] { return handled(world[1], MessageType::backward_grad) > grads1; }));
  CHECK(eventually([&] { return handled(world[1], MessageType::context_control) > cleanup1; }));
  CHECK(eventually([&] { return handled(world[0], MessageType::rref_control) > control0; }));
  CHECK(eventually([&] { return handled(world[1], MessageType::rref_ack) > acks1; }));
  // Every one of them, and every call and reply, came on the lane.
  CHECK(eventually([&] {
    return lane_received(world[0]) - lane0 == handled_lane_kinds(world[0]) - kinds0 &&
           lane_received(world[1]) - lane1 == handled_lane_kinds(world[1]) - kinds1;
  }));
  CAPTURE(lane_received(world[0]) - lane0);
  CAPTURE(handled_lane_kinds(world[0]) - kinds0);
  CHECK(bulk_sent(world[0]) == 0);
  world.shutdown_all();
  CHECK_FALSE(world.leaked());
}

TEST_CASE("protocol messages queued on a link that breaks go through CAF instead, each exactly once (B10)") {
  LocalWorld world(2);
  REQUIRE(open_lanes(world));
  auto& services = castor::detail::services(world[0]);
  const uint64_t acks1 = handled(world[1], MessageType::rref_ack);
  // A 64 MiB tensor keeps the link's writer busy; the acks (of control
  // messages worker1 never sent: it ignores them, but counts them) queue
  // behind it, and the link is shut under them.
  auto big = at::rand({int64_t(16) << 20});
  auto call = world[0].rpc_async<at::Tensor>("worker1", "identity", big);
  const int n = 50;
  for (int i = 0; i < n; ++i) services.send_to_peer(1, RRefControlAck{ControlId(0, uint64_t(1000000 + i))});
  castor::testing::runtime(world[0]).bulk->peer_down(1);
  // The large call may have left before the link was shut; if not, it
  // fails at once (B4), naming worker1.
  std::optional<at::Tensor> back;
  std::string failed;
  try {
    back = call.wait(milliseconds(30000));
  } catch (const UnreachableError& e) {
    failed = e.what();
  }
  CAPTURE(failed);
  CHECK((back ? at::equal(*back, big) : contains(failed, "worker1")));
  CHECK(eventually([&] { return handled(world[1], MessageType::rref_ack) - acks1 == uint64_t(n); }));
  std::this_thread::sleep_for(milliseconds(200));
  CHECK(handled(world[1], MessageType::rref_ack) - acks1 == uint64_t(n));  // none twice
  // The broken link is not used again; CAF carries on.
  auto x = at::rand({4});
  CHECK(at::equal(world[0].rpc_sync<at::Tensor>("worker1", "identity", x), x));
  world.shutdown_all();
  CHECK_FALSE(world.leaked());
}

TEST_CASE("gradients flow back through calls whose tensors took the bulk path") {
  LocalWorld world(2);
  auto a = at::rand({512, 256}).set_requires_grad(true);
  auto b = at::rand({512, 256}).set_requires_grad(true);
  autograd::Context ctx(world[0]);
  auto c = world[0].rpc_sync<at::Tensor>("worker1", "my_add", a, b);
  ctx.backward({(c * c).sum()});
  auto grads = ctx.gradients();
  CHECK(at::allclose(grads.at(a), 2 * (a + b).detach()));
  CHECK(at::allclose(grads.at(b), 2 * (a + b).detach()));
  CHECK(eventually([&] { return bulk_sent(world[0]) >= 1 && bulk_sent(world[1]) >= 1; }));
}

TEST_CASE("bulk_threshold 0 turns the bulk path off: large tensors go through CAF") {
  LocalWorld world(2, [](WorkerOptions& o) { o.bulk_threshold = 0; });
  CHECK(castor::testing::runtime(world[0]).bulk == nullptr);
  auto big = at::rand({600, 600});
  CHECK(at::equal(world[0].rpc_sync<at::Tensor>("worker1", "identity", big), big));
}

TEST_CASE("garbage on a bulk port closes that link, the worker keeps serving") {
  LocalWorld world(2);
  auto port = castor::testing::runtime(world[1]).bulk->port();
  for (const std::string& junk : {std::string("GET / HTTP/1.0\r\n\r\n"), std::string("CSB1\x05\0\0\0", 8),
                                 std::string("\x43\x53\x42\x31\x00\x00\x00\x00\x04\x00\x00\x00\x09\xff\xff", 15)}) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    ::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    ::close(fd);
  }
  auto big = at::rand({600, 600});
  auto out = bounded(milliseconds(30000), "a call after garbage on the bulk port",
                     [&] { return world[0].rpc_sync<at::Tensor>("worker1", "identity", big); });
  CHECK(at::equal(out, big));
}

// Note [Hostile input]: a bool byte other than 0 or 1 is undefined
// behaviour in libtorch. A large tensor's bytes skip the message's decoder,
// so the bulk path checks them itself, and the caller hears why from either
// lane in the same words.
TEST_CASE("a bool tensor whose bytes are not 0 or 1 is refused with why, whichever lane carried it, and the worker keeps serving") {
  LocalWorld world(2);
  for (int64_t n : {int64_t(16), int64_t(1) << 20}) {  // inside the message / on the bulk path
    CAPTURE(n);
    auto bytes = at::zeros({n}, at::kByte);
    bytes[n - 1] = 2;
    auto forged = bytes.view(at::kBool);
    auto bulk_before = bulk_received(world[1]);
    auto e = error_of([&] { world[0].rpc_sync<at::Tensor>("worker1", "identity", forged); });
    CHECK(contains(e, "could not decode a call request from worker worker0"));
    CHECK(contains(e, "a bool tensor element of 2"));
    CHECK(bulk_received(world[1]) == bulk_before + (n > 16 ? 1 : 0));
    auto fine = at::rand({n}) > 0.5;
    CHECK(at::equal(world[0].rpc_sync<at::Tensor>("worker1", "identity", fine), fine));
  }
  world.shutdown_all();
  CHECK_FALSE(world.leaked());
}

TEST_CASE("a call or gradient on a bulk link must name the link's own rank as its sender: a forged one, or an unknown frame type, closes the link (B8, B10)") {
  namespace bulk = castor::detail::bulk;
  LocalWorld world(2);
  auto greet = [&] { return greet_as_worker0(world); };
  // Sends `head` on a new link and checks that worker1 closes it.
  auto closed_after = [&](const std::vector<char>& head) {
    int fd = greet();
    REQUIRE(::send(fd, head.data(), head.size(), MSG_NOSIGNAL) == ssize_t(head.size()));
    char byte = 0;
    bool closed = ::recv(fd, &byte, 1, 0) == 0;
    ::close(fd);
    return closed;
  };
  // A call that claims to come from worker1 itself: worker1 closes the
  // link without running it. (A call in worker0's name would run: a
  // stranger at a door without a secret is a peer, which the warning at
  // start says.)
  auto before = finished_slow_calls.load();
  castor::CallRequest req;
  req.id = castor::CallId(0, uint64_t(1) << 40 | 1);
  req.caller = 1;
  req.function = "sleep_ms";
  req.args = {castor::Value(int64_t(1))};
  CHECK(closed_after(bulk::make_frame(bulk::kRequest, bulk::envelope_of(req), {}, req.id).head));
  // A gradient whose answer would go to worker1 itself (B10).
  const auto grads = handled(world[1], MessageType::backward_grad);
  castor::BackwardGrad grad;
  grad.context = castor::ContextId(0, 77);
  grad.from = 1;
  grad.request = 5;
  grad.grads = {castor::Value(at::ones({2}))};
  CHECK(closed_after(bulk::make_frame(bulk::kBackwardGrad, bulk::envelope_of(grad), {}, {}).head));
  CHECK(handled(world[1], MessageType::backward_grad) == grads);
  // A frame type this version does not know.
  auto unknown = bulk::make_frame(bulk::kRequest, bulk::envelope_of(req), {}, req.id).head;
  unknown[0] = char(bulk::kLastFrameType + 1);
  CHECK(closed_after(unknown));
  CHECK(world[0].rpc_sync<int64_t>("worker1", "sleep_ms", int64_t(1)) == 1);
  CHECK(finished_slow_calls.load() == before + 1);  // that call, not the forged one
  world.shutdown_all();
  CHECK_FALSE(world.leaked());
}

TEST_CASE("a bulk link that cannot be opened sends through CAF instead (B4)") {
  LocalWorld world(2);
  // Point worker0 at a port where nobody listens (before its first large
  // call): a new world in which worker1's bulk port is elsewhere (M1).
  auto& rt0 = castor::testing::runtime(world[0]);
  auto nowhere = free_port();
  rt0.membership.update([&](const castor::detail::World& w) {
    auto members = w.members();
    members[1].bulk_port = nowhere;
    return w.with_members(std::move(members));
  });
  auto big = at::rand({600, 600});
  auto out = bounded(milliseconds(30000), "a large call without a bulk link",
                     [&] { return world[0].rpc_sync<at::Tensor>("worker1", "identity", big); });
  CHECK(at::equal(out, big));
  CHECK(bulk_sent(world[0]) == 0);
  CHECK(eventually([&] { return bulk_sent(world[1]) == 1; }));  // the reply still took worker1's own link
  world.shutdown_all();
  CHECK_FALSE(world.leaked());
}

TEST_CASE("a link's reader or a CAF thread never waits for a dial: a large reply from there goes through CAF while the writer opens the link (B8)") {
  LocalWorld world(2);
  SilentBulkPort silent(world);
  auto& dialed = silent.dialed;
  auto& dial_over = silent.dial_over;
  // A builtin with small arguments runs where its call arrives, and its
  // result is large (512 KiB, over bulk_threshold). The first call comes
  // through CAF (no link is open yet) and runs on one of worker1's CAF
  // threads: the reply starts the dial of worker1's link and leaves at once.
  const int64_t n = int64_t(1) << 16;
  auto first = bounded(milliseconds(30000), "a large reply from a CAF thread",
                       [&] { return world[0].rpc_sync<at::Tensor>("worker1", "aten::arange", n); });
  CHECK_MESSAGE(!dial_over.load(), "the reply waited on worker1's CAF thread for its dial of the link to worker0");
  CHECK(at::equal(first, at::arange(n)));
  CHECK(eventually([&] { return dialed.load(); }));
  // worker0's small calls open its link into worker1 (B11: after kOpenAfter).
  auto x = at::ones({4});
  CHECK(eventually([&] {
    CHECK(at::equal(world[0].rpc_sync<at::Tensor>("worker1", "identity", x), x));
    return lane_received(world[1]) > 0;
  }));
  REQUIRE_MESSAGE(!dial_over.load(), "the dial ended before the test came to its large reply from the reader");
  // Now the call comes on the link and runs on worker1's reader (B8).
  auto out = bounded(milliseconds(30000), "a large reply from a link's reader",
                     [&] { return world[0].rpc_sync<at::Tensor>("worker1", "aten::arange", n); });
  CHECK_MESSAGE(!dial_over.load(), "the reply waited on worker1's reader for its dial of the link to worker0");
  CHECK(at::equal(out, at::arange(n)));
  CHECK(bulk_sent(world[1]) == 0);
  // The dial gives up; worker1 keeps serving through CAF.
  silent.join();
  CHECK(dial_over.load());
  CHECK(at::equal(world[0].rpc_sync<at::Tensor>("worker1", "aten::arange", n), out));
  world.shutdown_all();
  CHECK_FALSE(world.leaked());
}

TEST_CASE("the program ends while a dial that a CAF thread started is in flight: the dial is cut, the workers end, nothing leaks (B8)") {
  LocalWorld world(2);
  SilentBulkPort silent(world);
  const int64_t n = int64_t(1) << 16;
  auto first = bounded(milliseconds(30000), "a large reply from a CAF thread",
                       [&] { return world[0].rpc_sync<at::Tensor>("worker1", "aten::arange", n); });
  CHECK(at::equal(first, at::arange(n)));
  CHECK(eventually([&] { return silent.dialed.load(); }));
  REQUIRE_MESSAGE(!silent.dial_over.load(), "the dial ended before the test came to the end of its program");
  world.shutdown_all();  // bounded
  CHECK_FALSE(world.leaked());
  // Teardown shut the dial's socket (stop_dialing) rather than wait out its
  // deadline in stop(), which joins the writer that dials.
  CHECK_MESSAGE(silent.cut_short(), "worker1's teardown waited for its dial to end by itself");
}

TEST_CASE("a worker that stops while its reply waits for the link's dial cuts the dial, and the reply goes through CAF (B8), plain and TLS") {
  bool tls = false;
  SUBCASE("plain") { tls = false; }
  SUBCASE("TLS") { tls = true; }
  CAPTURE(tls);
  LocalWorld world(2, tls_if(tls, "bulk-cut-dial"));
  SilentBulkPort silent(world);
  // worker0's call carries a large tensor; `identity` runs on an executor
  // thread of worker1, which may wait for a dial: its large reply waits for
  // worker1's dial of its link to worker0, at the silent port. Meanwhile
  // that thread holds the reply gate that teardown closes.
  const auto x = at::arange(int64_t(1) << 16);
  auto reply = world[0].rpc_async<at::Tensor>("worker1", "identity", x);
  REQUIRE(eventually([&] { return silent.dialed.load(); }));
  REQUIRE_MESSAGE(!silent.dial_over.load(), "the dial ended before worker1 was stopped");
  CHECK_FALSE(reply.is_done());
  bounded(milliseconds(30000), "worker1's shutdown(false)", [&] { world[1].shutdown(false); });
  CHECK_MESSAGE(silent.cut_short(), "worker1's teardown waited for its dial to end by itself");
  // The replier stopped waiting and sent through CAF, still up then.
  auto out = bounded(milliseconds(30000), "the reply", [&] { return reply.wait(milliseconds(20000)); });
  CHECK(at::equal(out, x));
  world[0].shutdown(false);
}

TEST_CASE("one receiver thread reads all of a worker's links, and writers end when idle (B11), plain and TLS") {
  bool tls = false;
  SUBCASE("plain") { tls = false; }
  SUBCASE("TLS") { tls = true; }
  CAPTURE(tls);
  const int n = 4;
  std::function<void(WorkerOptions&)> tweak;
  if (tls) {
    auto certs = make_certs("bulk-b11", {"worker0", "worker1", "worker2", "worker3"});
    tweak = [certs](WorkerOptions& o) { o.tls = tls_files(certs, o.name); };
  }
  LocalWorld world(n, tweak);
  // Every worker calls every other until a whole round rode the lanes: each
  // worker then took n-1 calls and n-1 replies on n-1 links of its own.
  auto x = at::rand({4});
  int wrong = 0;
  CHECK(eventually([&] {
    std::vector<uint64_t> before;
    for (int i = 0; i < n; ++i) before.push_back(lane_received(world[size_t(i)]));
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        if (i != j && !at::equal(world[size_t(i)].rpc_sync<at::Tensor>("worker" + std::to_string(j), "identity", x), x))
          ++wrong;
    for (int i = 0; i < n; ++i)
      if (lane_received(world[size_t(i)]) - before[size_t(i)] != uint64_t(2 * (n - 1))) return false;
    return true;
  }));
  CHECK(wrong == 0);
  // One receiver per worker, whatever the number of its links.
  CHECK(threads_named("castor-bulk-in") == n);
  // The writers that opened the links end once idle (a second); a lane
  // needs none while its frames leave from their senders' threads.
  CHECK(eventually([&] { return threads_named("castor-bulk-out") == 0; }));
  // A large tensor queues for a writer, which starts again.
  auto big = at::rand({512, 512});
  auto before = bulk_received(world[1]);
  CHECK(at::equal(world[0].rpc_sync<at::Tensor>("worker1", "identity", big), big));
  CHECK(bulk_received(world[1]) == before + 1);
  world.shutdown_all();
  CHECK_FALSE(world.leaked());
}

TEST_CASE("a peer that stops mid-frame holds only its own link: the receiver reads the others meanwhile (B11)") {
  namespace bulk = castor::detail::bulk;
  LocalWorld world(2);
  CHECK(open_lanes(world));
  // Stranger 1 stops inside an envelope, stranger 2 inside a tensor's bytes.
  castor::CallRequest req;
  req.id = castor::CallId(0, uint64_t(1) << 40 | 2);
  req.caller = 0;
  req.function = "identity";
  req.args = {castor::Value(at::ones({4}))};
  auto in_envelope = bulk::make_frame(bulk::kRequest, bulk::envelope_of(req), {}, req.id).head;
  int stalled_envelope = greet_as_worker0(world);
  REQUIRE(::send(stalled_envelope, in_envelope.data(), in_envelope.size() - 5, MSG_NOSIGNAL) ==
          ssize_t(in_envelope.size() - 5));
  castor::CallRequest large = req;
  large.args = {castor::Value(at::ones({1 << 20}))};  // 4 MiB
  std::vector<at::Tensor> tensors;
  castor::detail::IdGenerator<castor::TransferId> ids(0);
  for (auto& a : large.args) bulk::extract(a, 1024, ids, tensors);
  REQUIRE(tensors.size() == 1);
  auto in_tensor = bulk::make_frame(bulk::kRequest, bulk::envelope_of(large), tensors, large.id).head;
  int stalled_tensor = greet_as_worker0(world);
  REQUIRE(::send(stalled_tensor, in_tensor.data(), in_tensor.size(), MSG_NOSIGNAL) == ssize_t(in_tensor.size()));
  std::vector<char> half(size_t(1) << 21, 0);
  REQUIRE(::send(stalled_tensor, half.data(), half.size(), MSG_NOSIGNAL) == ssize_t(half.size()));
  // worker0's own link into worker1 goes on: small calls and a large one.
  auto received = lane_received(world[1]);
  for (int i = 0; i < 50; ++i) {
    auto v = at::full({4}, float(i));
    CHECK(at::equal(world[0].rpc_sync<at::Tensor>("worker1", "identity", v), v));
  }
  CHECK(lane_received(world[1]) - received == 50);
  auto big = at::rand({512, 512});
  auto out = bounded(milliseconds(30000), "a large call beside two stalled links",
                     [&] { return world[0].rpc_sync<at::Tensor>("worker1", "identity", big); });
  CHECK(at::equal(out, big));
  // The strangers give up: their links close, nothing of them ran.
  auto handled_calls = handled(world[1], MessageType::call_request);
  ::close(stalled_envelope);
  ::close(stalled_tensor);
  std::this_thread::sleep_for(milliseconds(200));
  CHECK(handled(world[1], MessageType::call_request) == handled_calls);
  CHECK(world[0].rpc_sync<int64_t>("worker1", "sleep_ms", int64_t(1)) == 1);
  world.shutdown_all();
  CHECK_FALSE(world.leaked());
}
