// The public API as DESIGN.md §4 writes it, compiled outside castor's tree,
// then run as a one-worker world.
#include <castor.hpp>

CASTOR_FUNCTION(my_add, [](torch::Tensor a, torch::Tensor b) { return a + b; });
CASTOR_FUNCTION(with_commas, [](int64_t a, int64_t b) { return std::max(a, b); });

int main(int argc, char** argv) {
  castor::WorkerOptions opts;
  opts.name = "worker0";
  opts.rank = 0;
  opts.world_size = 1;
  opts.master = {"127.0.0.1", uint16_t(argc > 1 ? std::atoi(argv[1]) : 29500)};
  castor::Worker w = castor::init_rpc(opts);
  auto a = torch::ones({2});
  torch::Tensor t = w.rpc_sync<torch::Tensor>("worker0", "my_add", a, a);
  castor::Future<torch::Tensor> f = w.rpc_async<torch::Tensor>("worker0", "my_add", a, t);
  castor::Promise<int64_t> p;
  castor::Future<int64_t> later = p.future();
  p.set_value(7);
  std::vector<castor::Future<torch::Tensor>> fs{f};
  castor::wait_all(fs);
  auto g = w.rpc_sync<torch::Tensor>("worker0", "aten::add", a, a, castor::Timeout{std::chrono::milliseconds(10000)});
  castor::WorkerInfo me = w.get_worker_info();
  bool ok = t.sum().item<double>() == 4 && f.wait().sum().item<double>() == 6 && later.wait() == 7 &&
            g.sum().item<double>() == 4 && me.name == "worker0" && me.id == 0 &&
            w.rpc_sync<int64_t>("worker0", "with_commas", 3, 9) == 9;
  w.shutdown();
  std::printf("consumer: %s\n", ok ? "ok" : "WRONG RESULTS");
  return ok ? 0 : 1;
}
