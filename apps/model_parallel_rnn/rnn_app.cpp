// `castor run rnn`: the distributed-autograd RFC's model-parallel RNN. The
// embedding table and the decoder live on one worker (the "parameter
// server"), the LSTM on another, and the trainer (rank 0) drives forward,
// distributed backward and the DistributedOptimizer step across them.
//
// The task is synthetic on purpose (no download, deterministic): sequences
// of a small vocabulary where each token follows from the one before by a
// fixed rule, so the next-token loss falls from ln(vocab) towards zero as the
// three parts learn together.
#include <cmath>
#include <cstdio>
#include <tuple>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/rnn.h>
#include <torch/nn/pimpl.h>

#include "apps/common/app.hpp"
#include "apps/common/progress.hpp"
#include "apps/common/training_log.hpp"
#include "engine/context.hpp"
#include "optimizer/dist_optimizer.hpp"
#include "optimizer/remote_module.hpp"

namespace castor::apps::rnn {

struct EmbeddingTableImpl : torch::nn::Module {
  EmbeddingTableImpl(int64_t vocab, int64_t dim) : table(register_module("table", torch::nn::Embedding(vocab, dim))) {}
  at::Tensor forward(const at::Tensor& tokens) { return table(tokens); }
  torch::nn::Embedding table;
};
TORCH_MODULE(EmbeddingTable);

// The LSTM's output sequence only: every batch starts from a zero state.
struct LstmStageImpl : torch::nn::Module {
  LstmStageImpl(int64_t in, int64_t hidden)
      : lstm(register_module("lstm", torch::nn::LSTM(torch::nn::LSTMOptions(in, hidden).batch_first(true)))) {}
  at::Tensor forward(const at::Tensor& x) { return std::get<0>(lstm->forward(x)); }
  torch::nn::LSTM lstm;
};
TORCH_MODULE(LstmStage);

struct DecoderImpl : torch::nn::Module {
  DecoderImpl(int64_t hidden, int64_t vocab) : linear(register_module("linear", torch::nn::Linear(hidden, vocab))) {}
  at::Tensor forward(const at::Tensor& h) { return linear(h); }
  torch::nn::Linear linear;
};
TORCH_MODULE(Decoder);

}  // namespace castor::apps::rnn

CASTOR_REMOTE_MODULE(castor::apps::rnn::EmbeddingTable, int64_t, int64_t);
CASTOR_REMOTE_MODULE(castor::apps::rnn::LstmStage, int64_t, int64_t);
CASTOR_REMOTE_MODULE(castor::apps::rnn::Decoder, int64_t, int64_t);

namespace castor::apps::rnn {
namespace {

// Sequences x[b, t] and their next tokens y[b, t] = x[b, t + 1], where
// x[b, t + 1] = (3 * x[b, t] + 1) mod vocab from a random first token.
std::pair<at::Tensor, at::Tensor> make_batch(int64_t batch, int64_t length, int64_t vocab, at::Generator& gen) {
  auto seq = at::empty({batch, length + 1}, at::kLong);
  seq.select(1, 0).copy_(at::randint(vocab, {batch}, gen, at::kLong));
  for (int64_t t = 1; t <= length; ++t) seq.select(1, t).copy_((seq.select(1, t - 1) * 3 + 1).remainder(vocab));
  return {seq.slice(1, 0, length).contiguous(), seq.slice(1, 1, length + 1).contiguous()};
}

// Note [Flags], F1.
void declare_flags(po::options_description& flags) {
  flags.add_options()
      ("steps", po::value<int64_t>()->default_value(150)->value_name("N"), "training steps")
      ("batch-size", po::value<int64_t>()->default_value(32)->value_name("N"), "sequences per step")
      ("seq-len", po::value<int64_t>()->default_value(12)->value_name("N"), "tokens per sequence")
      ("vocab", po::value<int64_t>()->default_value(16)->value_name("N"), "vocabulary size")
      ("embed", po::value<int64_t>()->default_value(16)->value_name("N"), "embedding size")
      ("hidden", po::value<int64_t>()->default_value(32)->value_name("N"), "LSTM hidden size")
      ("optimizer", po::value<std::string>()->default_value("adam")->value_name("adam|sgd"), "the optimizer")
      ("lr", po::value<double>()->value_name("X"), "learning rate (default 0.01 for adam, 0.5 for sgd)")
      ("seed", po::value<int64_t>()->default_value(1)->value_name("N"), "data seed")
      ("log-every", po::value<int64_t>()->default_value(10)->value_name("N"),
       "print the loss every N steps (0: only at the end)")
      ("out", po::value<std::string>()->value_name("PREFIX"),
       "write PREFIX.csv and PREFIX.svg (default castor-out/rnn-<job>)")
      ("no-progress", po::bool_switch(), "no progress bar");
}

optim::Spec spec_from(const Flags& flags) {
  auto name = flags.get<std::string>("optimizer");
  double lr = flags.find<double>("lr").value_or(name == "sgd" ? 0.5 : 0.01);
  if (name == "adam") return optim::Adam{lr};
  if (name == "sgd") return optim::SGD{lr};
  throw std::invalid_argument("--optimizer must be adam or sgd, got '" + name + "'");
}

// F5 of Note [Flags].
void check_flags(const Flags& args) {
  spec_from(args);
  for (const char* name : {"steps", "batch-size", "seq-len", "embed", "hidden"})
    if (args.get<int64_t>(name) < 1) throw std::invalid_argument("--" + std::string(name) + " must be at least 1");
  if (args.get<int64_t>("vocab") < 2) throw std::invalid_argument("--vocab must be at least 2");
}

// Its flags were checked by parse_app_flags (F5), as every app's.
int run(Worker& w, const Flags& args) {
  auto spec = spec_from(args);
  int64_t steps = args.get<int64_t>("steps"), batch = args.get<int64_t>("batch-size");
  int64_t length = args.get<int64_t>("seq-len"), vocab = args.get<int64_t>("vocab");
  int64_t embed = args.get<int64_t>("embed"), hidden = args.get<int64_t>("hidden");
  if (w.rank() != 0) return 0;  // the parts' owners serve until the trainer is done
  if (w.world_size() < 2) throw std::invalid_argument("rnn: needs at least 2 workers");
  int64_t ps = 1, lstm_owner = w.world_size() >= 3 ? 2 : 1;  // ranks
  std::printf("model-parallel RNN: embedding + decoder on %s, LSTM on %s, trainer %s\n",
              w.get_worker_info(ps).name.c_str(), w.get_worker_info(lstm_owner).name.c_str(), w.name().c_str());
  std::fflush(stdout);

  nn::RemoteModule<EmbeddingTable> embedding(w, ps, vocab, embed);
  nn::RemoteModule<LstmStage> lstm(w, lstm_owner, embed, hidden);
  nn::RemoteModule<Decoder> decoder(w, ps, hidden, vocab);
  std::vector<RRef<at::Tensor>> params;
  for (auto& p : embedding.parameter_rrefs()) params.push_back(p);
  for (auto& p : lstm.parameter_rrefs()) params.push_back(p);
  for (auto& p : decoder.parameter_rrefs()) params.push_back(p);
  optim::DistributedOptimizer optimizer(w, spec, params);

  auto gen = at::detail::createCPUGenerator(uint64_t(args.get<int64_t>("seed")));
  TrainingLog log("castor model-parallel RNN (loss per step)", "step");
  ProgressBar bar("training", steps, !args.get<bool>("no-progress"));
  int64_t every = args.get<int64_t>("log-every");
  for (int64_t step = 1; step <= steps; ++step) {
    auto [x, y] = make_batch(batch, length, vocab, gen);
    double loss_value;
    {
      autograd::Context ctx(w);
      auto logits = decoder.forward(lstm.forward(embedding.forward(x)));
      auto loss = at::nll_loss(at::log_softmax(logits.reshape({-1, vocab}), 1), y.reshape({-1}));
      ctx.backward({loss});
      optimizer.step(ctx.id());
      loss_value = loss.item<double>();
    }
    log.add(CurvePoint{double(step), loss_value, -1, 0, 0});
    char note[48];
    std::snprintf(note, sizeof(note), "loss %.4f", loss_value);
    bar.update(step, note);
    if (every > 0 && (step % every == 0 || step == 1)) {
      std::printf("\rstep %lld/%lld %s\n", (long long)step, (long long)steps, note);
      std::fflush(stdout);
    }
  }
  const auto& pts = log.points();
  std::printf("loss: first step %.4f, last step %.4f (ln %lld = %.4f)\n", pts.front().loss, pts.back().loss,
              (long long)vocab, std::log(double(vocab)));
  auto paths = log.write(curve_prefix(args.find<std::string>("out").value_or(""), "rnn"));
  std::printf("curves: %s and %s\n", paths[0].c_str(), paths[1].c_str());
  std::fflush(stdout);
  return 0;
}

AppRegistrar registrar{
    App{"rnn", "the RFC's model-parallel RNN: embedding + decoder on worker1, LSTM on worker2, trainer on worker0", 3,
        declare_flags, run, check_flags}};

}  // namespace
}  // namespace castor::apps::rnn
