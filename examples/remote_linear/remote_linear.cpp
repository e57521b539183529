// A linear layer lives on worker1 and learns to sum its inputs, trained from
// worker0 with distributed autograd and a distributed optimizer; a Tally
// object on worker1 keeps the running loss. Run it with
//   castor run -n 2 ./remote_linear --steps 200
#include <cstdio>
#include <cstdlib>
#include <string>

#include <castor.hpp>

// Any libtorch module can live on another worker: register it with the
// types of its constructor arguments.
CASTOR_REMOTE_MODULE(torch::nn::Linear, int64_t, int64_t);

// A function every worker can run; `where` is also its typed handle.
CASTOR_FUNCTION(where, [] { return castor::current_worker().name(); });

// An object of your own class on another worker: register the constructor
// and the methods callers may use.
class Tally {
 public:
  explicit Tally(double start) : sum_(start) {}
  double add(double loss) { return sum_ += loss; }

 private:
  double sum_;
};
CASTOR_CLASS(Tally).constructor<double>().method("add", &Tally::add);

int main(int argc, char** argv) {
  int64_t steps = argc > 2 && std::string(argv[1]) == "--steps" ? std::atoll(argv[2]) : 200;
  try {
    castor::Worker w = castor::init_rpc_from_env();  // castor run tells each process who it is
    if (w.rank() == 0) {                              // the others serve until rank 0 is done
      std::printf("the layer lives on %s\n", w.rpc_sync(1, where).c_str());  // by rank; a std::string
      castor::nn::RemoteModule<torch::nn::Linear> layer(w, "worker1", 10, 1);  // built on worker1
      castor::optim::DistributedOptimizer opt(w, castor::optim::Adam{0.05}, layer.parameter_rrefs());
      castor::RRef<Tally> tally = w.remote<Tally>(1, 0.0);  // constructed on rank 1
      for (int64_t step = 1; step <= steps; ++step) {
        auto x = torch::randn({32, 10});
        castor::autograd::Context ctx(w);  // one context per step
        auto loss = (layer.forward(x) - x.sum(1, true)).pow(2).mean();
        ctx.backward({loss});  // reaches worker1 by itself
        opt.step(ctx.id());    // updates the weights on worker1
        double sum = tally.rpc_sync(&Tally::add, loss.item<double>());  // types checked when compiled
        if (step == 1 || step == steps)
          std::printf("step %lld: loss %.4f (sum of losses %.2f)\n", (long long)step, loss.item<double>(), sum);
      }
    }
    w.shutdown();  // graceful: returns when every worker is done
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "remote_linear: %s\n", e.what());
    return 1;
  }
}
