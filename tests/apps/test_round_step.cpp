// S5 of Note [Shared parameters]: a sync round's mean and SGD's step in one
// pass, against libtorch's SGD on ATen's mean, with and without momentum,
// and its momentum kept where SGD's save and load find it.
#include <doctest/doctest.h>

#include <sstream>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "apps/parameter_server/parameter_server.hpp"
#include "apps/parameter_server/round_step.hpp"

namespace ps = castor::apps::ps;

namespace {

// Pushes of round r from `trainers` trainers, shaped as `like`: values that
// differ per trainer, tensor and round, so that a mean over the wrong pushes
// or an element out of place shows.
std::vector<ps::Params> pushes_of(const ps::Params& like, int trainers, int round) {
  std::vector<ps::Params> out(size_t(trainers), ps::Params{});
  for (int t = 0; t < trainers; ++t)
    for (size_t i = 0; i < like.size(); ++i)
      out[size_t(t)].push_back(
          at::sin(at::arange(like[i].numel(), at::kFloat) * 0.01 * double(t + 1) + double(round) + double(i))
              .reshape(like[i].sizes()));
  return out;
}

ps::Params copies(const ps::Params& p) {
  ps::Params out;
  for (const auto& t : p) out.push_back(t.detach().clone());
  return out;
}

void check_close(const ps::Params& a, const ps::Params& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(at::allclose(a[i], b[i], 1e-5, 1e-6));
}

std::string saved(const ps::ParameterServer& server) {
  torch::serialize::OutputArchive archive;
  server.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void load(ps::ParameterServer& server, const std::string& bytes) {
  torch::serialize::InputArchive archive;
  std::istringstream in(bytes);
  archive.load_from(in);
  server.load(archive);
}

// One sync round of `server`'s trainers (ranks 1..n) on these pushes; the
// parameters it replies, copied.
ps::Params round_of(ps::ParameterServer& server, const std::vector<ps::Params>& pushes) {
  std::vector<castor::Future<ps::Params>> replies;
  for (size_t t = 0; t < pushes.size(); ++t) replies.push_back(server.update(pushes[t], 0.1, int64_t(t + 1)));
  REQUIRE(replies.back().is_done());
  return copies(replies.front().wait());
}

// The same pushes as tensors that are not contiguous: the round goes through
// ATen's ops and SGD's own step instead of the one pass.
std::vector<ps::Params> strided(const std::vector<ps::Params>& pushes) {
  std::vector<ps::Params> out;
  for (const auto& push : pushes) {
    ps::Params p;
    for (const auto& t : push) {
      auto wide = at::zeros({t.numel(), 2}, at::kFloat);
      wide.select(1, 0).copy_(t.reshape({-1}));
      p.push_back(wide.select(1, 0).view(t.sizes()));
      REQUIRE_FALSE(p.back().is_contiguous());
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

TEST_CASE("round step: one pass is libtorch's SGD on the pushes' mean, plain and with momentum, 1 to 3 pushes") {
  at::NoGradGuard no_grad;
  for (double momentum : {0.0, 0.9}) {
    for (int trainers : {1, 2, 3}) {
      CAPTURE(momentum);
      CAPTURE(trainers);
      auto start = ps::init_mlp(8, 3);
      ps::Params fused = copies(start), reference = copies(start);
      for (auto& p : reference) p.requires_grad_(true);
      torch::optim::SGD sgd(reference, torch::optim::SGDOptions(0.05).momentum(momentum));
      std::vector<ps::MomentumBuffer> buffers;
      for (const auto& p : fused)
        if (momentum != 0) buffers.push_back({at::empty_like(p), true});
      for (int round = 0; round < 3; ++round) {
        auto pushes = pushes_of(start, trainers, round);
        std::vector<const ps::Params*> views;
        for (const auto& p : pushes) views.push_back(&p);
        REQUIRE(ps::fits_round_step(fused, views, buffers));
        ps::step_on_round_mean(fused, views, 0.05, momentum, buffers);
        for (auto& b : buffers) b.first = false;
        for (size_t i = 0; i < reference.size(); ++i) {
          auto mean = at::zeros_like(reference[i]);
          for (const auto& p : pushes) mean.add_(p[i]);
          reference[i].mutable_grad() = mean.div_(double(trainers));
        }
        sgd.step();
        check_close(fused, reference);
        for (size_t k = 0; k < pushes.size(); ++k)  // read, never written
          CHECK(at::equal(pushes[k][0], pushes_of(start, trainers, round)[k][0]));
      }
    }
  }
}

TEST_CASE("round step: what the one pass does not take is refused, for ATen's ops to take") {
  auto params = ps::init_mlp(8, 3);
  auto pushes = pushes_of(params, 2, 0);
  std::vector<const ps::Params*> views{&pushes[0], &pushes[1]};
  CHECK(ps::fits_round_step(params, views, {}));
  CHECK_FALSE(ps::fits_round_step(params, {}, {}));  // no push: no mean
  auto doubles = pushes;
  doubles[1][2] = doubles[1][2].to(at::kDouble);
  CHECK_FALSE(ps::fits_round_step(params, {&doubles[0], &doubles[1]}, {}));
  auto odd = strided(pushes);
  CHECK_FALSE(ps::fits_round_step(params, {&odd[0], &odd[1]}, {}));
  auto short_push = pushes[0];
  short_push.pop_back();
  CHECK_FALSE(ps::fits_round_step(params, {&short_push}, {}));
  std::vector<ps::MomentumBuffer> too_few{{at::empty_like(params[0]), true}};
  CHECK_FALSE(ps::fits_round_step(params, views, too_few));
}

TEST_CASE("parameter server, sync: rounds in one pass keep SGD's momentum where a checkpoint finds it, as ATen's ops do") {
  // Two servers from the same seed with momentum 0.9: one takes contiguous
  // pushes (the one pass), the other the same values strided (ATen's ops,
  // SGD's own step). A third is loaded from the first's checkpoint after
  // three rounds: if the one pass kept its momentum anywhere but SGD's
  // state, the third would start it afresh and part from the others.
  ps::ParameterServer one_pass(2, 8, 0.1, 0.9, 5, true), aten(2, 8, 0.1, 0.9, 5, true);
  auto like = one_pass.parameters();
  check_close(like, aten.parameters());
  for (int round = 0; round < 3; ++round) {
    auto pushes = pushes_of(like, 2, round);
    check_close(round_of(one_pass, pushes), round_of(aten, strided(pushes)));
  }
  ps::ParameterServer resumed(2, 8, 0.1, 0.9, 99, true);  // another seed: all it has comes from the checkpoint
  load(resumed, saved(one_pass));
  check_close(resumed.parameters(), one_pass.parameters());
  for (int round = 3; round < 5; ++round) {
    auto pushes = pushes_of(like, 2, round);
    auto a = round_of(one_pass, pushes), b = round_of(aten, strided(pushes)), c = round_of(resumed, pushes);
    check_close(a, b);
    check_close(a, c);
  }
  // And the other way: ATen's momentum, saved, goes on in one pass.
  ps::ParameterServer from_aten(2, 8, 0.1, 0.9, 98, true);
  load(from_aten, saved(aten));
  auto pushes = pushes_of(like, 2, 5);
  check_close(round_of(from_aten, pushes), round_of(one_pass, pushes));
}
