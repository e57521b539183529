// castor::Checkpoint (Note [Checkpoint]): a model-parallel job's remote
// module, owned tensors, a DistributedOptimizer's state and a user object
// saved by their owners and restored into fresh objects, so that training
// goes on exactly as without the break; a failed save commits nothing, a
// damaged checkpoint loads nothing, an owner SIGKILLed in the middle of a
// save leaves the last checkpoint whole.
#include <doctest/doctest.h>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "engine/context.hpp"
#include "optimizer/checkpoint.hpp"
#include "support/cluster.hpp"
#include "support/errors.hpp"
#include "support/test_functions.hpp"

using namespace castor;
using castor::test::contains;
using castor::test::error_of;
using castor::test::LocalWorld;
using std::chrono::milliseconds;
namespace fs = std::filesystem;

namespace {

std::string fresh_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("castor-test-checkpoint-" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  return dir.string();
}

std::vector<std::string> step_folders(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory()) out.push_back(e.path().filename().string());
  return out;
}

// A model-parallel MLP: layer 1 a RemoteModule on worker1, layer 2 here,
// Adam over both through a DistributedOptimizer.
struct Model {
  nn::RemoteModule<torch::nn::Linear> layer1;
  torch::nn::Linear layer2;
  std::vector<RRef<at::Tensor>> mine;  // layer 2's parameters, owned here
  optim::DistributedOptimizer opt;

  static std::vector<RRef<at::Tensor>> own(Worker& w, torch::nn::Linear& l) {
    std::vector<RRef<at::Tensor>> out;
    for (auto& p : l->parameters()) out.push_back(w.make_rref(p));
    return out;
  }
  static std::vector<RRef<at::Tensor>> all(const nn::RemoteModule<torch::nn::Linear>& l1,
                                           const std::vector<RRef<at::Tensor>>& l2) {
    auto out = l1.parameter_rrefs();
    out.insert(out.end(), l2.begin(), l2.end());
    return out;
  }
  explicit Model(Worker& w)
      : layer1(w, "worker1", 4, 8),
        layer2(8, 3),
        mine(own(w, layer2)),
        opt(w, optim::Adam{0.05}, all(layer1, mine)) {}

  void step(Worker& w, int k) {
    auto x = torch::full({5, 4}, 0.1 * (k + 1)) + torch::arange(20, torch::kFloat).reshape({5, 4}) / 20;
    auto target = torch::ones({5, 3}) * (k % 3);
    autograd::Context ctx(w);
    auto loss = torch::mse_loss(layer2(layer1.forward(x).relu()), target);
    ctx.backward({loss});
    opt.step(ctx.id());
  }
  std::vector<at::Tensor> values() const {
    std::vector<at::Tensor> out;
    for (auto& r : layer1.parameter_rrefs()) out.push_back(r.to_here());
    for (auto& p : layer2->parameters()) out.push_back(p.detach().clone());
    return out;
  }
};

bool same(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!at::equal(a[i], b[i])) return false;
  return true;
}

Checkpoint& with_parts(Checkpoint& c, Model& m, const RRef<Ledger>& ledger) {
  return c.add("layer1", m.layer1).add("layer2", m.mine).add("adam", m.opt).add("ledger", ledger);
}

}  // namespace


TEST_CASE("a checkpoint restored into fresh objects: training goes on exactly as if it had never stopped") {
  LocalWorld world(2);
  auto& w = world[0];
  auto dir = fresh_dir("resume");
  torch::manual_seed(3);
  Model m(w);
  auto ledger = w.remote<Ledger>("worker1", "Ledger", int64_t(5));
  Checkpoint c(w, dir);
  with_parts(c, m, ledger);
  CHECK_FALSE(c.latest().has_value());
  CHECK_FALSE(c.restore().has_value());  // nothing yet: a fresh start
  for (int k = 0; k < 3; ++k) m.step(w, k);
  ledger.rpc_sync<int64_t>("add", int64_t(7));
  auto info = c.save(3, {{"note", "after three steps"}});
  CHECK(info.step == 3);
  CHECK(info.meta.at("note") == "after three steps");
  CHECK(info.keys == std::vector<std::string>{"layer1", "layer2", "adam", "ledger"});
  // One file per (part, owner): Adam has state on both owners.
  for (auto f : {"layer1@worker1.pt", "layer2@worker0.pt", "adam@worker0.pt", "adam@worker1.pt", "ledger@worker1.pt"})
    CHECK_MESSAGE(fs::exists(fs::path(info.folder) / f), f);
  CHECK(fs::exists(fs::path(dir) / "MANIFEST.json"));
  auto at_save = m.values();
  for (int k = 3; k < 6; ++k) m.step(w, k);
  auto undisturbed = m.values();
  CHECK_FALSE(same(at_save, undisturbed));

  // A restarted job: new objects built the same way, then the checkpoint.
  torch::manual_seed(99);  // other initial values: the checkpoint must replace them all
  Model again(w);
  auto ledger2 = w.remote<Ledger>("worker1", "Ledger", int64_t(0));
  Checkpoint c2(w, dir);
  with_parts(c2, again, ledger2);
  auto restored = c2.restore();
  REQUIRE(restored.has_value());
  CHECK(restored->step == 3);
  CHECK(restored->meta.at("note") == "after three steps");
  CHECK(same(again.values(), at_save));
  CHECK(ledger2.rpc_sync<int64_t>("total") == 12);
  CHECK(at::equal(ledger2.rpc_sync<at::Tensor>("weights"), at::arange(4, at::kFloat) * 5 + 7));
  for (int k = 3; k < 6; ++k) again.step(w, k);
  // Adam's moments and step counts came back too, so the steps after the
  // restore are the very steps after the save.
  CHECK(same(again.values(), undisturbed));

  // A later save replaces the earlier one: one step folder, the new manifest.
  c2.save(6);
  CHECK(c2.latest()->step == 6);
  CHECK(step_folders(dir).size() == 1);
}

TEST_CASE("a save that fails on one owner commits nothing: the last checkpoint stays, whole") {
  LocalWorld world(2);
  auto& w = world[0];
  auto dir = fresh_dir("failed-save");
  auto ledger = w.remote<Ledger>("worker1", "Ledger", int64_t(1));
  auto tensor = w.make_rref(at::ones({3}));
  Checkpoint c(w, dir);
  c.add("ledger", ledger).add("tensor", std::vector<RRef<at::Tensor>>{tensor});
  c.save(1);
  auto committed = c.latest()->folder;
  ledger.rpc_sync<int64_t>("add", int64_t(100));
  ledger.rpc_sync<bool>("fail_saves", true);  // the user's save() throws on worker1
  auto error = error_of<RemoteError>([&] { c.save(2); });
  CHECK(contains(error, "saving Checkpoint step 2 in " + dir + ", part 'ledger' on worker worker1"));
  CHECK(contains(error, "Ledger: this save fails on purpose"));
  CHECK(c.latest()->step == 1);
  CHECK(c.latest()->folder == committed);
  CHECK(step_folders(dir) == std::vector<std::string>{fs::path(committed).filename().string()});
  CHECK(c.restore()->step == 1);
  CHECK(ledger.rpc_sync<int64_t>("total") == 1);  // the value of step 1 is back

  // Parts the checkpoint cannot take are refused when added, by name.
  auto counter = w.remote<Counter>("worker1", "Counter", int64_t(0));
  CHECK(contains(error_of<CheckpointError>([&] { c.add("counter", counter); }),
                 "part 'counter': class 'Counter' has not opted in: register it with CASTOR_CLASS(Counter)"
                 "...checkpointed()"));
  CHECK(contains(error_of<CheckpointError>([&] { c.add("ledger", ledger); }), "the key 'ledger' is added twice"));
  CHECK(contains(error_of<CheckpointError>([&] { c.add("../x", ledger); }), "the key '../x' must be letters"));
  world.shutdown_all();
}

TEST_CASE("a damaged or foreign checkpoint is refused whole, naming the cause, and nothing is loaded") {
  LocalWorld world(2);
  auto& w = world[0];
  auto dir = fresh_dir("damaged");
  auto ledger = w.remote<Ledger>("worker1", "Ledger", int64_t(1));
  auto tensor = w.make_rref(at::ones({3}));
  Checkpoint c(w, dir);
  c.add("tensor", std::vector<RRef<at::Tensor>>{tensor}).add("ledger", ledger);
  auto info = c.save(4);
  ledger.rpc_sync<int64_t>("add", int64_t(10));
  tensor.local_value().fill_(9);

  // A file cut short: the sizes are checked before any part is loaded.
  auto file = fs::path(info.folder) / "ledger@worker1.pt";
  auto size = fs::file_size(file);
  fs::resize_file(file, size / 2);
  auto error = error_of<CheckpointError>([&] { c.restore(); });
  CHECK(contains(error, "Checkpoint step 4 in " + dir + " is damaged: " + file.string() + " has " +
                            std::to_string(size / 2) + " bytes, the manifest says " + std::to_string(size) +
                            "; nothing was loaded"));
  CHECK(at::equal(tensor.local_value(), at::full({3}, 9.0)));  // the other part was not loaded
  CHECK(ledger.rpc_sync<int64_t>("total") == 11);
  fs::remove(file);
  CHECK(contains(error_of<CheckpointError>([&] { c.restore(); }), file.string() + " is missing"));

  // Parts that do not match the program's.
  Checkpoint other(w, dir);
  other.add("tensor", std::vector<RRef<at::Tensor>>{tensor}).add("weights", std::vector<RRef<at::Tensor>>{tensor});
  CHECK(contains(error_of<CheckpointError>([&] { other.restore(); }), "has no part 'weights'; nothing was loaded"));
  Checkpoint moved(w, dir);
  moved.add("tensor", std::vector<RRef<at::Tensor>>{w.remote<at::Tensor>("worker1", "identity", at::ones({3}))});
  CHECK(contains(error_of<CheckpointError>([&] { moved.restore(); }),
                 "part 'tensor' was saved by worker0, but is owned by worker1 now; nothing was loaded"));

  // A tensor of another shape: the owner refuses it, naming itself.
  auto dir2 = fresh_dir("shape");
  Checkpoint small(w, dir2);
  small.add("t", std::vector<RRef<at::Tensor>>{w.remote<at::Tensor>("worker1", "identity", at::ones({3}))}).save(1);
  Checkpoint big(w, dir2);
  big.add("t", std::vector<RRef<at::Tensor>>{w.remote<at::Tensor>("worker1", "identity", at::ones({5}))});
  auto shape = error_of<RemoteError>([&] { big.restore(); });
  CHECK(contains(shape, "restoring Checkpoint step 1 in " + dir2 + ", file t@worker1.pt on worker worker1"));
  CHECK(contains(shape, "the checkpoint's tensor 0 has shape [3], not [5]"));

  // A module built with other sizes: refused before any tensor changes.
  auto dir3 = fresh_dir("module-shape");
  nn::RemoteModule<torch::nn::Linear> narrow(w, "worker1", int64_t(4), int64_t(8));
  Checkpoint(w, dir3).add("m", narrow).save(1);
  nn::RemoteModule<torch::nn::Linear> wide(w, "worker1", int64_t(4), int64_t(16));
  auto before = wide.parameter_rrefs()[0].to_here();
  Checkpoint wide_checkpoint(w, dir3);
  wide_checkpoint.add("m", wide);
  auto module_error = error_of<RemoteError>([&] { wide_checkpoint.restore(); });
  CHECK(contains(module_error, "restoring Checkpoint step 1 in " + dir3 + ", file m@worker1.pt on worker worker1"));
  CHECK(contains(module_error, "the checkpoint's 'weight' has shape [8, 4], not [16, 4]"));
  CHECK(at::equal(wide.parameter_rrefs()[0].to_here(), before));

  // A manifest that is not one.
  std::ofstream(fs::path(dir) / "MANIFEST.json", std::ios::trunc) << "{\"format\": \"something else\"}";
  CHECK(contains(error_of<CheckpointError>([&] { c.latest(); }),
                 "MANIFEST.json cannot be read: it is not a castor checkpoint manifest (format 'something else')"));
  std::ofstream(fs::path(dir) / "MANIFEST.json", std::ios::trunc) << "{\"format\": \"castor-checkpoint/1\", \"st";
  CHECK(contains(error_of<CheckpointError>([&] { c.restore(); }), "MANIFEST.json cannot be read: "));
  auto manifest = nlohmann::json::parse(std::ifstream(fs::path(dir2) / "MANIFEST.json"));
  manifest["parts"][0]["files"][0]["file"] = "../../etc/passwd";
  std::ofstream(fs::path(dir2) / "MANIFEST.json", std::ios::trunc) << manifest.dump();
  CHECK(contains(error_of<CheckpointError>([&] { big.restore(); }),
                 "cannot be read: its file '../../etc/passwd' is not a name in the folder"));
  world.shutdown_all();
}

TEST_CASE("an owner SIGKILLed in the middle of a save: the save fails naming it, the last checkpoint stays whole") {
  auto port = test::free_port();
  test::ChildWorker child(1, 2, port);
  auto w0 = init_rpc(test::local_options(0, 2, port));
  auto dir = fresh_dir("killed");
  auto ledger = w0.remote<Ledger>("worker1", "Ledger", int64_t(3));
  auto mine = w0.make_rref(at::arange(6, at::kFloat));
  Checkpoint c(w0, dir);
  c.add("mine", std::vector<RRef<at::Tensor>>{mine}).add("ledger", ledger);
  c.save(1);
  ledger.rpc_sync<bool>("slow_saves", int64_t(60000));  // its next save takes a minute
  auto saving = std::async(std::launch::async, [&] { return error_of<UnreachableError>([&] { c.save(2); }); });
  // worker0's own file is written at once; worker1 is still writing.
  CHECK(test::eventually([&] {
    for (const auto& f : step_folders(dir))
      if (f.rfind("step-2-", 0) == 0 && fs::exists(fs::path(dir) / f / "mine@worker0.pt")) return true;
    return false;
  }));
  child.kill();
  REQUIRE(saving.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  auto error = saving.get();
  CHECK(contains(error, "saving Checkpoint step 2 in " + dir + ", part 'ledger' on worker worker1"));
  CHECK(contains(error, "worker1"));
  CHECK(c.latest()->step == 1);
  CHECK(step_folders(dir).size() == 1);  // the half-written step 2 is gone
  // The part worker0 owns still loads from step 1 (what worker1 owned died
  // with it): a program may restore some of a checkpoint's parts.
  mine.local_value().fill_(0);
  Checkpoint survivor(w0, dir);
  survivor.add("mine", std::vector<RRef<at::Tensor>>{mine});
  REQUIRE(survivor.restore().has_value());
  CHECK(at::equal(mine.local_value(), at::arange(6, at::kFloat)));
  CHECK(child.wait_exit(milliseconds(10000)) == 128 + SIGKILL);
  CHECK(contains(error_of<UnreachableError>([&] { w0.shutdown(); }), "worker worker1 is unreachable"));
}
