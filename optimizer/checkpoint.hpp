// castor::Checkpoint: a training job's state saved at a step boundary by
// every owner into one folder, and committed by one manifest renamed into
// place; a half-written checkpoint is never loaded. See Note [Checkpoint]
// in checkpoint.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "actors/api/worker_options.hpp"

#include "actors/api/worker.hpp"
#include "optimizer/dist_optimizer.hpp"
#include "optimizer/remote_module.hpp"
#include "rref/rref.hpp"

namespace castor {

/// A checkpoint that cannot be saved or restored for a reason of its own
/// (a damaged or foreign manifest, a missing file, parts that do not match).
/// A failure on an owner is that owner's RpcError instead, naming it.
struct CheckpointError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A committed checkpoint, as its manifest says.
struct CheckpointInfo {
  int64_t step = 0;
  std::string folder;                       // its files, under the directory
  std::map<std::string, std::string> meta;  // what save() was given
  std::vector<std::string> keys;            // its parts
};

class Checkpoint {
 public:
  /// Checkpoints in `directory` (made when missing). Every owner of a part
  /// writes and reads its own files there: on one host a local folder;
  /// across hosts, shared storage mounted at the same path on every host.
  /// `timeout` bounds each owner's write or read of its part.
  Checkpoint(Worker& w, std::string directory, Timeout timeout = Timeout{std::chrono::minutes(10)});

  // The parts, each under its own key (letters, digits, '_', '-', '.').

  /// A RemoteModule: the module's parameters, buffers and submodules.
  template <class M>
  Checkpoint& add(const std::string& key, const nn::RemoteModule<M>& module) {
    return add(key, module.module_rref());
  }
  /// An object of a class that opted in: CASTOR_CLASS(T)...checkpointed().
  template <class T>
  Checkpoint& add(const std::string& key, const RRef<T>& object) {
    static_assert(!is_wire_type<T>::value,
                  "Checkpoint::add(key, RRef<T>) takes an object of a registered class; "
                  "tensors go in as a std::vector<RRef<at::Tensor>>");
    Part part{key, "object", detail::type_name_of<T>(), {}};
    auto limit = timeout_;
    part.pieces.push_back(Piece{object.owner_name(),
                                [object, limit](const std::string& path) {
                                  return object.template rpc_async<int64_t>(detail::kSaveStateMethod, path, limit);
                                },
                                [object, limit](const std::string& path) {
                                  return object.template rpc_async<bool>(detail::kLoadStateMethod, path, limit);
                                }});
    return add_part(std::move(part));
  }
  /// Tensors owned anywhere (one file per owner), e.g. parameter_rrefs().
  Checkpoint& add(const std::string& key, const std::vector<RRef<at::Tensor>>& tensors);
  /// The state of each owner's optimizer (momentum, Adam's moments, step
  /// counts). Not the learning rate: the program sets that (as it did).
  Checkpoint& add(const std::string& key, const optim::DistributedOptimizer& optimizer);

  /// Every owner writes its parts; then the manifest commits them as step
  /// `step` and older checkpoints are removed. Call it at a step boundary
  /// (no backward or optimizer step of these parts running). On an error
  /// the last committed checkpoint stays as it was.
  CheckpointInfo save(int64_t step, std::map<std::string, std::string> meta = {});

  /// Loads the last committed checkpoint into every part; nothing when there
  /// is none. Checks the whole checkpoint (its parts, owners and file sizes)
  /// before anything is loaded; each owner then checks its file against its
  /// part (names and shapes) before it changes anything. An owner that still
  /// fails leaves what the other owners loaded: do not train on after that.
  std::optional<CheckpointInfo> restore();

  /// The last committed checkpoint's manifest, without loading it.
  std::optional<CheckpointInfo> latest() const;

  const std::string& directory() const { return directory_; }

 private:
  struct Piece {  // one owner's share of a part: one file
    std::string owner;
    std::function<Future<int64_t>(const std::string& path)> save;  // its size in bytes
    std::function<Future<bool>(const std::string& path)> load;
  };
  struct Part {
    std::string key;
    std::string kind;  // "object", "tensors", "optimizer"
    std::string what;  // the object's class, for messages and the manifest
    std::vector<Piece> pieces;
  };
  Checkpoint& add_part(Part part);

  Worker* w_;
  std::string directory_;
  Timeout timeout_;
  std::vector<Part> parts_;
};

}  // namespace castor
