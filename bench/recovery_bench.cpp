// castor-bench recovery: what surviving workers costs. A model-parallel model
// (Linear 1024x1024 on worker1, Linear 1024x10 here, Adam over both through
// a DistributedOptimizer): a Checkpoint's save and restore; ten training
// steps with and without a checkpoint after them; and the time from a
// peer's SIGKILL to rank 0's failure handler. PyTorch's side saves the same
// modules its way (an RPC to the owner to torch.save its module, torch.save
// here); its DistributedOptimizer has no state to save.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <thread>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

#include "bench_suites.hpp"
#include "engine/context.hpp"
#include "optimizer/checkpoint.hpp"

namespace castor::bench {
namespace {

namespace fs = std::filesystem;

double ms(const std::function<void()>& f, int n, int warmup) { return median_us(n, f, warmup) / 1e3; }

}  // namespace

std::vector<Figure> bench_recovery(const Options& opts) {
  std::vector<Figure> out;
  auto dir = fs::temp_directory_path() / ("castor-bench-checkpoint-" + std::to_string(::getpid()));
  {
    BenchWorld world(opts, 2);
    auto& w = world.self();
    nn::RemoteModule<torch::nn::Linear> body(w, "worker1", int64_t(1024), int64_t(1024));
    torch::nn::Linear head(1024, 10);
    std::vector<RRef<at::Tensor>> mine;
    for (auto& p : head->parameters()) mine.push_back(w.make_rref(p));
    auto params = body.parameter_rrefs();
    params.insert(params.end(), mine.begin(), mine.end());
    optim::DistributedOptimizer adam(w, optim::Adam{1e-3}, params);
    auto x = at::randn({64, 1024});
    auto y = at::randn({64, 10});
    auto step = [&] {
      autograd::Context ctx(w);
      auto loss = at::mse_loss(head(body.forward(x).relu()), y);
      ctx.backward({loss});
      adam.step(ctx.id());
    };
    step();  // Adam has state now
    int r = opts.reps;
    Checkpoint modules(w, (dir / "modules").string());
    modules.add("body", body).add("head", mine);
    out.push_back({"checkpoint_modules_save_ms", ms([&] { modules.save(1); }, 10 * r, 2)});
    Checkpoint full(w, (dir / "full").string());
    full.add("body", body).add("head", mine).add("adam", adam);
    out.push_back({"checkpoint_with_adam_save_ms", ms([&] { full.save(1); }, 10 * r, 2)});
    out.push_back({"checkpoint_with_adam_restore_ms", ms([&] { full.restore(); }, 10 * r, 2)});
    auto ten_steps = [&] {
      for (int i = 0; i < 10; ++i) step();
    };
    double plain = ms(ten_steps, 5 * r, 1);
    double saved = ms([&] { ten_steps(); full.save(2); }, 5 * r, 1);
    out.push_back({"train_10_steps_ms", plain});
    out.push_back({"train_10_steps_then_checkpoint_ms", saved});
    out.push_back({"checkpoint_every_10_steps_slowdown_x", saved / plain});
  }
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  {
    // Death: rank 0 takes it in charge (a handler), so shutdown ends among the survivors.
    BenchWorld world(opts, 3);
    auto& w = world.self();
    auto told = std::make_shared<std::promise<std::chrono::steady_clock::time_point>>();
    auto when = told->get_future();
    auto id = w.on_worker_failure([told](const WorkerFailure&) {
      try {
        told->set_value(std::chrono::steady_clock::now());
      } catch (const std::future_error&) {  // told once already
      }
    });
    auto killed = std::chrono::steady_clock::now();
    ::kill(world.peer_pid(2), SIGKILL);
    if (when.wait_for(std::chrono::seconds(30)) == std::future_status::ready)
      out.push_back({"detect_sigkill_ms", std::chrono::duration<double, std::milli>(when.get() - killed).count()});
    // Rejoin (Note [Rejoin]): from starting its new life to the world
    // having it back, beside the floor of starting any process of this
    // binary (libtorch and CAF loading).
    auto floor = process_start_ms(opts, 1);
    auto started = std::chrono::steady_clock::now();
    if (world.restart_peer(2, 2) > 0) {
      while (!w.is_alive(2) && std::chrono::steady_clock::now() - started < std::chrono::seconds(30))
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (w.is_alive(2) && w.rpc_sync<int64_t>(2, "scale_rank") == 2) {
        double rejoin = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
        out.push_back({"rejoin_ms", rejoin});
        out.push_back({"rejoin_over_process_start_x", rejoin / floor});
      }
    }
    w.remove_failure_handler(id);
  }
  return out;
}

}  // namespace castor::bench
