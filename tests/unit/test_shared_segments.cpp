// Shared tensors' segments in one process (Note [Shared tensors] in
// actors/transport/bulk/shared_segments.cpp): the move in place, the
// registry, and map_shared's refusals. Between processes: test_bulk.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <string>

#include <ATen/ATen.h>
#include <torch/optim/sgd.h>

#include "actors/api/shared_memory.hpp"
#include "actors/transport/bulk/shared_segments.hpp"

namespace bulk = castor::detail::bulk;

TEST_CASE("share_memory moves a storage in place: values, views and an optimizer's parameter follow (SH1)") {
  const auto before = bulk::shared_segments_alive();
  {
    auto w = at::arange(12, at::kFloat).reshape({3, 4}).requires_grad_(true);
    auto row = w.select(0, 1);  // a view made before
    torch::optim::SGD sgd({w}, torch::optim::SGDOptions(0.5));
    auto* impl = w.unsafeGetTensorImpl();
    const void* old_bytes = w.data_ptr();
    CHECK_FALSE(castor::is_shared(w));
    CHECK(&castor::share_memory(w) == &w);
    CHECK(castor::is_shared(w));
    CHECK(castor::is_shared(row));
    CHECK(w.unsafeGetTensorImpl() == impl);
    CHECK(w.data_ptr() != old_bytes);
    CHECK(at::equal(w.detach(), at::arange(12, at::kFloat).reshape({3, 4})));
    CHECK(row[2].item<float>() == 6.0f);
    CHECK(bulk::shared_segments_alive() == before + 1);
    // Twice is once.
    const void* shared_bytes = w.data_ptr();
    castor::share_memory(w);
    CHECK(w.data_ptr() == shared_bytes);
    CHECK(bulk::shared_segments_alive() == before + 1);
    // The optimizer steps the shared bytes.
    w.sum().backward();
    sgd.step();
    CHECK(row[2].item<float>() == 5.5f);
    auto ref = bulk::shared_ref_of(w);
    CHECK(ref.fd >= 0);
    CHECK(ref.offset == 0);
    CHECK(bulk::shared_ref_of(row).offset == 4 * sizeof(float));
    CHECK(bulk::shared_ref_of(w.t()).fd == -1);  // not contiguous: a copy travels
    CHECK(bulk::shared_ref_of(at::zeros({4})).fd == -1);
  }
  CHECK(bulk::shared_segments_alive() == before);  // the segment went with its tensors
}

TEST_CASE("share_memory refuses what cannot be shared, and leaves an empty tensor alone") {
  CHECK_THROWS_WITH_AS(castor::share_memory(at::Tensor()), "share_memory: only CPU tensors with a storage can be shared",
                       std::invalid_argument);
  auto empty = at::zeros({0});
  castor::share_memory(empty);
  CHECK_FALSE(castor::is_shared(empty));
  std::vector<at::Tensor> params{at::ones({5}), at::ones({7})};
  castor::share_memory(params);
  CHECK(castor::is_shared(params[0]));
  CHECK(castor::is_shared(params[1]));
  // It cannot grow out of its segment; within it, a resize is fine.
  CHECK_THROWS(params[0].resize_({1000}));
  params[1].resize_({3});
  CHECK(castor::is_shared(params[1]));
  // A sparse tensor has no storage to share, and asking costs nothing.
  auto sparse = at::eye(3).to_sparse();
  CHECK_THROWS_AS(castor::share_memory(sparse), std::invalid_argument);
  CHECK_FALSE(castor::is_shared(sparse));
}

TEST_CASE("map_shared maps a segment by its descriptor and refuses one that is not castor's, or a tensor past its end (SH4)") {
  auto t = castor::share_memory(at::arange(1000, at::kFloat));
  auto ref = bulk::shared_ref_of(t);
  REQUIRE(ref.fd >= 0);
  std::string why;
  // A segment known here is found by its id: the view is of the same bytes.
  auto view = bulk::map_shared(::getpid(), ref, {10}, at::kFloat, 40, why);
  REQUIRE(view.defined());
  CHECK(view.data_ptr() == t.data_ptr());
  // Past the segment's end.
  bulk::SharedRef past = ref;
  past.offset = 3996;
  CHECK_FALSE(bulk::map_shared(::getpid(), past, {10}, at::kFloat, 40, why).defined());
  CHECK(why.find("does not fit its segment of 4000") != std::string::npos);
  // An id this process does not know, on a descriptor that is not a segment.
  int other = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(other >= 0);
  bulk::SharedRef stranger{other, ref.id + 0x100000, 0};
  why.clear();
  CHECK_FALSE(bulk::map_shared(::getpid(), stranger, {10}, at::kFloat, 40, why).defined());
  CHECK(why == "descriptor " + std::to_string(other) + " of pid " + std::to_string(::getpid()) +
                   " is not its shared segment");
  // A descriptor that is not open.
  ::close(other);
  why.clear();
  CHECK_FALSE(bulk::map_shared(::getpid(), stranger, {10}, at::kFloat, 40, why).defined());
  CHECK(why == "cannot read descriptor " + std::to_string(other) + " of pid " + std::to_string(::getpid()) +
                   ": No such file or directory");
}
