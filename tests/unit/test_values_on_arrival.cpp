// Note [Values on arrival] without workers: V1's one holder per value in the
// OwnerIndex, whoever asks first, and V2's acknowledgement, sent once by the
// second of its two halves in either order or from two threads at once.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "rref/calls/on_arrival.hpp"
#include "rref/owner_index.hpp"

using namespace castor;
using namespace castor::detail;

namespace {

RRefId id_of(uint64_t local) { return RRefId(WorkerId(1), local); }

// A join whose acknowledgements land in `acks` (and the last one's outcome).
std::shared_ptr<CreationJoin> join_into(std::atomic<int>& acks, std::optional<Outcome>& last) {
  return std::make_shared<CreationJoin>([&acks, &last](Outcome o) {
    last = std::move(o);
    acks.fetch_add(1);
  });
}

}  // namespace

TEST_CASE("V1: the index makes one holder per value, whichever side asks first") {
  OwnerIndex index;
  auto theirs = std::make_shared<Holder>();
  // The reader first: the context, making the owner later, gets the same one.
  auto made = index.holder_for(id_of(1));
  CHECK(index.holder_for(id_of(1), theirs) == made);
  CHECK(index.find(id_of(1)) == made);
  // The context (or register_owner) first: its holder is the one kept.
  CHECK(index.holder_for(id_of(2), theirs) == theirs);
  CHECK(index.holder_for(id_of(2)) == theirs);
  // Not listed for inspection until the context made its owner.
  CHECK(index.owned().empty());
  index.added(id_of(2), theirs, std::make_shared<OwnerStats>());
  REQUIRE(index.owned().size() == 1);
  CHECK(index.owned()[0].type == "pending");
  index.removed(id_of(1));
  CHECK(index.find(id_of(1)) == nullptr);
  CHECK(index.find(id_of(3)) == nullptr);  // a fetch of a value not here goes to the context
}

TEST_CASE("V2: the acknowledgement leaves once, after both halves, with the context's failure if any") {
  std::atomic<int> acks{0};
  std::optional<Outcome> last;
  {
    auto join = join_into(acks, last);
    join->value_set();
    CHECK(acks == 0);  // the fork is not counted yet
    join->counted(std::nullopt);
    CHECK(acks == 1);
    REQUIRE(last);
    CHECK(last->ok);
  }
  {
    auto join = join_into(acks, last);
    join->counted(ErrorInfo{ErrorKind::Lookup, "worker1", "RRef 1:7 no longer exists here"});
    CHECK(acks == 1);
    join->value_set();
    CHECK(acks == 2);
    REQUIRE(last);
    CHECK_FALSE(last->ok);
    CHECK(last->error.message == "RRef 1:7 no longer exists here");
  }
  // Both halves at once, from two threads, many times: one ack each.
  for (int i = 0; i < 200; ++i) {
    auto join = join_into(acks, last);
    std::thread setter([join] { join->value_set(); });
    join->counted(std::nullopt);
    setter.join();
  }
  CHECK(acks == 202);
}

TEST_CASE("V3: a fetch answered from the holder waits for the value, then sends a copy or the creation's error") {
  auto counters = std::make_shared<RRefCounters>();
  auto holder = std::make_shared<Holder>();
  std::optional<Outcome> got;
  answer_fetch(holder, id_of(4), "worker1", counters, [&](Outcome o) { got = std::move(o); });
  CHECK_FALSE(got);
  CHECK(counters->pending_fetches == 1);
  holder->set_value(Value(int64_t(42)));
  REQUIRE(got);
  CHECK(got->ok);
  CHECK(got->value.to_int() == 42);
  CHECK(counters->pending_fetches == 0);
  auto failed = std::make_shared<Holder>();
  failed->set_error(ErrorInfo{ErrorKind::Remote, "worker1", "my_fn: boom"});
  got.reset();
  answer_fetch(failed, id_of(5), "worker1", counters, [&](Outcome o) { got = std::move(o); });
  REQUIRE(got);  // already set: answered at once
  CHECK_FALSE(got->ok);
  CHECK(got->error.worker == "worker1");
  CHECK(got->error.message == "RRef " + to_string(id_of(5)) +
                                  " owned by worker worker1 has no value: the call that was to create it failed: "
                                  "my_fn: boom");
}
