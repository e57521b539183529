// Checkpoint: the driver's side (the folder, the manifest, the commit).
//
// Note [Checkpoint]
// ~~~~~~~~~~~~~~~~~
// A checkpoint is a folder of files, one per (part, owner), and the one
// manifest that names them. The driver (the worker that calls save) asks
// each owner to write its files; the owners write in parallel.
//  C1. A file appears under its name whole or not at all: the owner writes
//      a temporary file, syncs it and renames it (write_state_file); the
//      driver syncs the folder once every owner has answered.
//  C2. The commit is the rename of MANIFEST.json.tmp to MANIFEST.json, after
//      every owner has answered with its file's size; a save that failed
//      anywhere commits nothing, and the last committed checkpoint stays.
//  C3. Each save writes a new folder (step-<step>-<nonce>), never one that a
//      committed manifest names, so a save that dies half-way cannot damage
//      the checkpoint before it. After a commit, the other step folders
//      (older ones, and those of saves that failed) are removed.
//  C4. Only a manifest is loaded, and only whole: restore first checks that
//      it has every part with the same kind and owners, and that every file
//      has the size the manifest recorded; any mismatch is a
//      CheckpointError and nothing is loaded. Each owner then reads its
//      whole file and checks it against its part (every name, every shape)
//      before it changes anything; an owner that still fails (a module of
//      another shape) fails restore, naming it, and what the other owners
//      loaded stays loaded.
//  C5. Owners read and write the same paths as the driver: the directory is
//      local on one host, shared storage across hosts.
// The state of an optimizer and of owned tensors is saved and loaded as a
// job of the owner's optimizer actor, between steps (local_optimizer.cpp);
// an object's (a remote module's too), as one of its method calls: so a
// module's file and the optimizer's may straddle a step that another
// trainer runs meanwhile. Save at a step boundary of the whole job.
#include "optimizer/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

namespace castor {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kFormat = "castor-checkpoint/1";
constexpr const char* kManifest = "MANIFEST.json";

bool valid_key(const std::string& key) {
  if (key.empty() || key == "." || key == "..") return false;
  for (char c : key)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  return true;
}

// Flushes a file or a folder's entries to the disk; throws if it cannot.
void sync(const fs::path& path, bool folder) {
  int fd = ::open(path.c_str(), (folder ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) throw CheckpointError("Checkpoint: cannot open " + path.string() + ": " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) throw CheckpointError("Checkpoint: cannot sync " + path.string() + ": " + std::strerror(err));
}

// C2: the manifest is written beside its final name, synced, renamed; the
// step folder's entry is on the disk before the manifest that names it.
void commit_manifest(const fs::path& directory, const json& manifest) {
  auto temporary = directory / (std::string(kManifest) + ".tmp");
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << manifest.dump(2) << '\n';
    out.flush();
    if (!out) throw CheckpointError("Checkpoint: cannot write " + temporary.string());
  }
  sync(temporary, false);
  sync(directory, true);
  std::error_code ec;
  fs::rename(temporary, directory / kManifest, ec);
  if (ec) throw CheckpointError("Checkpoint: cannot commit " + temporary.string() + ": " + ec.message());
  sync(directory, true);
}

std::string nonce() {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  return std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(now).count()) + "-" +
         std::to_string(::getpid());
}

std::string file_name(const std::string& key, const std::string& owner) { return key + "@" + owner + ".pt"; }

// Waits for every future (C2: no owner may still write when the driver
// goes on), then rethrows the first error with what it was about.
template <class T>
void wait_every(std::vector<std::pair<std::string, Future<T>>>& running, std::vector<T>* results,
                const std::string& doing) {
  std::exception_ptr first;
  std::string first_about;
  for (auto& [about, f] : running) {
    try {
      auto v = f.wait();
      if (results) results->push_back(v);
    } catch (...) {
      if (!first) {
        first = std::current_exception();
        first_about = about;
      }
    }
  }
  if (!first) return;
  try {
    std::rethrow_exception(first);
  } catch (const RpcError& e) {
    auto info = e.info();
    info.message = doing + ", " + first_about + ": " + info.message;
    throw_rpc_error(std::move(info));
  } catch (const std::exception& e) {
    throw CheckpointError(doing + ", " + first_about + ": " + e.what());
  }
}

CheckpointInfo info_from(const json& m, const fs::path& directory) {
  CheckpointInfo info;
  info.step = m.at("step").get<int64_t>();
  info.folder = (directory / m.at("folder").get<std::string>()).string();
  info.meta = m.value("meta", std::map<std::string, std::string>{});
  for (const auto& p : m.at("parts")) info.keys.push_back(p.at("key").get<std::string>());
  return info;
}

// A name inside the checkpoint's directory, never a path out of it.
bool plain_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

// Every field restore reads is there, of its type (json::at and get throw
// otherwise); file and folder names stay inside the directory.
void check_fields(const json& m) {
  m.at("step").get<int64_t>();
  if (!plain_name(m.at("folder").get<std::string>()))
    throw CheckpointError("its folder '" + m.at("folder").get<std::string>() + "' is not a name in the directory");
  m.value("meta", std::map<std::string, std::string>{});
  for (const auto& p : m.at("parts")) {
    p.at("key").get<std::string>();
    p.at("kind").get<std::string>();
    p.at("what").get<std::string>();
    for (const auto& f : p.at("files")) {
      f.at("owner").get<std::string>();
      f.at("bytes").get<int64_t>();
      if (!plain_name(f.at("file").get<std::string>()))
        throw CheckpointError("its file '" + f.at("file").get<std::string>() + "' is not a name in the folder");
    }
  }
}

// The committed manifest, checked to be one; nothing when there is none.
std::optional<json> read_manifest(const fs::path& directory) {
  auto path = directory / kManifest;
  if (!fs::exists(path)) return std::nullopt;
  try {
    std::ifstream in(path);
    auto m = json::parse(in);
    if (m.value("format", "") != kFormat)
      throw CheckpointError("it is not a castor checkpoint manifest (format '" + m.value("format", "") + "')");
    check_fields(m);
    return m;
  } catch (const std::exception& e) {
    throw CheckpointError("Checkpoint: " + path.string() + " cannot be read: " + e.what());
  }
}

}  // namespace

Checkpoint::Checkpoint(Worker& w, std::string directory, Timeout timeout)
    : w_(&w), directory_(std::move(directory)), timeout_(timeout) {
  if (directory_.empty()) throw CheckpointError("Checkpoint: the directory is empty");
  std::error_code ec;
  fs::create_directories(directory_, ec);
  if (ec || !fs::is_directory(directory_))
    throw CheckpointError("Checkpoint: cannot make the directory " + directory_ + ": " + ec.message());
}

Checkpoint& Checkpoint::add_part(Part part) {
  if (!valid_key(part.key))
    throw CheckpointError("Checkpoint: the key '" + part.key + "' must be letters, digits, '_', '-' or '.'");
  for (const auto& p : parts_)
    if (p.key == part.key) throw CheckpointError("Checkpoint: the key '" + part.key + "' is added twice");
  if (part.kind == "object") {
    const auto* cls = detail::ClassRegistry::instance().find(part.what);
    if (!cls || !cls->method(detail::kSaveStateMethod))
      throw CheckpointError("Checkpoint: part '" + part.key + "': class '" + part.what +
                            "' has not opted in: register it with CASTOR_CLASS(" + part.what +
                            ")...checkpointed() and give it save(torch::serialize::OutputArchive&) const and "
                            "load(torch::serialize::InputArchive&)");
  }
  parts_.push_back(std::move(part));
  return *this;
}

Checkpoint& Checkpoint::add(const std::string& key, const std::vector<RRef<at::Tensor>>& tensors) {
  std::map<std::string, std::vector<RRef<at::Tensor>>> by_owner;
  for (const auto& t : tensors) by_owner[t.owner_name()].push_back(t);
  Part part{key, "tensors", "tensors", {}};
  auto* w = w_;
  for (auto& [owner, mine] : by_owner)
    part.pieces.push_back(Piece{owner,
                                [w, owner = owner, mine = mine, limit = timeout_](const std::string& path) {
                                  return w->rpc_async<int64_t>(owner, "castor.ckpt.save_tensors", mine, path, limit);
                                },
                                [w, owner = owner, mine = mine, limit = timeout_](const std::string& path) {
                                  return w->rpc_async<bool>(owner, "castor.ckpt.load_tensors", mine, path, limit);
                                }});
  return add_part(std::move(part));
}

Checkpoint& Checkpoint::add(const std::string& key, const optim::DistributedOptimizer& optimizer) {
  Part part{key, "optimizer", "DistributedOptimizer", {}};
  auto* w = w_;
  for (const auto& [owner, id] : optimizer.owners_)
    part.pieces.push_back(Piece{owner,
                                [w, owner = owner, id = id, limit = timeout_](const std::string& path) {
                                  return w->rpc_async<int64_t>(owner, "castor.ckpt.save_optimizer", id, path, limit);
                                },
                                [w, owner = owner, id = id, limit = timeout_](const std::string& path) {
                                  return w->rpc_async<bool>(owner, "castor.ckpt.load_optimizer", id, path, limit);
                                }});
  return add_part(std::move(part));
}

CheckpointInfo Checkpoint::save(int64_t step, std::map<std::string, std::string> meta) {
  if (parts_.empty()) throw CheckpointError("Checkpoint: nothing to save: add a part first");
  fs::path directory(directory_);
  auto folder_name = "step-" + std::to_string(step) + "-" + nonce();  // C3
  auto folder = directory / folder_name;
  std::error_code made;
  fs::create_directories(folder, made);
  if (made) throw CheckpointError("Checkpoint: cannot make " + folder.string() + ": " + made.message());
  auto doing = "Checkpoint step " + std::to_string(step) + " in " + directory_;
  std::vector<std::pair<std::string, Future<int64_t>>> writing;
  std::vector<int64_t> sizes;
  try {
    for (const auto& part : parts_)
      for (const auto& piece : part.pieces)
        writing.emplace_back("part '" + part.key + "' on worker " + piece.owner,
                             piece.save((folder / file_name(part.key, piece.owner)).string()));
    wait_every(writing, &sizes, "saving " + doing);
    sync(folder, true);
  } catch (...) {
    std::vector<int64_t> ignored_sizes;  // C2: no owner may still be writing when the folder goes
    try {
      wait_every(writing, &ignored_sizes, "");
    } catch (...) {
    }
    std::error_code ignored;
    fs::remove_all(folder, ignored);  // nothing committed; the last checkpoint stays
    throw;
  }
  json parts = json::array();
  size_t next = 0;
  for (const auto& part : parts_) {
    json files = json::array();
    for (const auto& piece : part.pieces)
      files.push_back({{"owner", piece.owner},
                       {"file", file_name(part.key, piece.owner)},
                       {"bytes", sizes[next++]}});
    parts.push_back({{"key", part.key}, {"kind", part.kind}, {"what", part.what}, {"files", files}});
  }
  json manifest = {{"format", kFormat},   {"step", step},           {"folder", folder_name},
                   {"saved_by", w_->name()}, {"world_size", w_->world_size()}, {"meta", meta},
                   {"parts", parts}};
  commit_manifest(directory, manifest);  // C2: the commit
  std::error_code listed;  // C3: the rest goes (committed already: a failure here costs disk space only)
  for (auto it = fs::directory_iterator(directory, listed); !listed && it != fs::directory_iterator();
       it.increment(listed)) {
    auto name = it->path().filename().string();
    std::error_code ignored;
    if (name.rfind("step-", 0) == 0 && name != folder_name && it->is_directory(ignored)) fs::remove_all(it->path(), ignored);
  }
  return info_from(manifest, directory);
}

std::optional<CheckpointInfo> Checkpoint::latest() const {
  auto m = read_manifest(directory_);
  if (!m) return std::nullopt;
  return info_from(*m, directory_);
}

std::optional<CheckpointInfo> Checkpoint::restore() {
  auto manifest = read_manifest(directory_);
  if (!manifest) return std::nullopt;
  const auto& m = *manifest;
  auto info = info_from(m, directory_);
  auto doing = "Checkpoint step " + std::to_string(info.step) + " in " + directory_;
  // C4: the whole checkpoint is checked before anything is loaded.
  std::vector<std::pair<const Piece*, fs::path>> plan;
  for (const auto& part : parts_) {
    const json* saved = nullptr;
    for (const auto& p : m.at("parts"))
      if (p.at("key") == part.key) saved = &p;
    if (!saved) throw CheckpointError(doing + " has no part '" + part.key + "'; nothing was loaded");
    if (saved->at("kind") != part.kind || saved->at("what") != part.what)
      throw CheckpointError(doing + ": part '" + part.key + "' was saved as " + saved->at("kind").get<std::string>() +
                            " " + saved->at("what").get<std::string>() + ", not " + part.kind + " " + part.what +
                            "; nothing was loaded");
    std::set<std::string> then, now;
    for (const auto& f : saved->at("files")) then.insert(f.at("owner").get<std::string>());
    for (const auto& piece : part.pieces) now.insert(piece.owner);
    if (then != now) {
      auto list = [](const std::set<std::string>& s) {
        std::string out;
        for (const auto& x : s) out += (out.empty() ? "" : ", ") + x;
        return out;
      };
      throw CheckpointError(doing + ": part '" + part.key + "' was saved by " + list(then) + ", but is owned by " +
                            list(now) + " now; nothing was loaded");
    }
    for (const auto& piece : part.pieces)
      for (const auto& f : saved->at("files")) {
        if (f.at("owner") != piece.owner) continue;
        auto path = fs::path(info.folder) / f.at("file").get<std::string>();
        std::error_code ec;
        auto size = fs::file_size(path, ec);
        auto want = f.at("bytes").get<int64_t>();
        if (ec || int64_t(size) != want)
          throw CheckpointError(doing + " is damaged: " + path.string() +
                                (ec ? " is missing" : " has " + std::to_string(size) + " bytes") + ", the manifest says " +
                                std::to_string(want) + "; nothing was loaded");
        plan.emplace_back(&piece, path);
      }
  }
  std::vector<std::pair<std::string, Future<bool>>> loading;
  for (size_t i = 0; i < plan.size(); ++i) {
    const auto& [piece, path] = plan[i];
    loading.emplace_back("file " + path.filename().string() + " on worker " + piece->owner, piece->load(path.string()));
  }
  wait_every<bool>(loading, nullptr, "restoring " + doing);
  return info;
}

}  // namespace castor
