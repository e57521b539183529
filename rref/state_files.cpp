// The files of Note [Checkpoint] (optimizer/checkpoint.cpp) on an owner: a
// state is written whole or not at all (C1), and read back into an archive.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "rref/class_registry.hpp"

namespace castor::detail {
namespace {

// Flushes a file to the disk: a host that crashes after this keeps it.
void sync_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) throw std::runtime_error("cannot sync " + path + ": " + std::strerror(err));
}

}  // namespace

int64_t write_state_file(const std::string& path, const std::function<void(torch::serialize::OutputArchive&)>& fill) {
  namespace fs = std::filesystem;
  auto temporary = path + ".tmp." + std::to_string(::getpid());
  try {
    torch::serialize::OutputArchive archive;
    fill(archive);
    archive.save_to(temporary);
    sync_file(temporary);
    fs::rename(temporary, path);  // C1: the name appears only with the whole file behind it
    // The folder's entries are synced once, by the driver, before it commits (C2).
    return int64_t(fs::file_size(path));
  } catch (...) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw;
  }
}

void read_state_file(const std::string& path, const std::function<void(torch::serialize::InputArchive&)>& read) {
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  read(archive);
}

void save_tensors(torch::serialize::OutputArchive& archive, const std::vector<at::Tensor>& tensors) {
  archive.write("count", at::scalar_tensor(int64_t(tensors.size()), at::kLong));
  for (size_t i = 0; i < tensors.size(); ++i) archive.write(std::to_string(i), tensors[i].detach());
}

void load_tensors(torch::serialize::InputArchive& archive, const std::vector<at::Tensor>& into) {
  at::Tensor count;
  archive.read("count", count);
  if (count.item<int64_t>() != int64_t(into.size()))
    throw std::invalid_argument("the checkpoint holds " + std::to_string(count.item<int64_t>()) + " tensors, not " +
                                std::to_string(into.size()));
  std::vector<at::Tensor> read(into.size());
  for (size_t i = 0; i < into.size(); ++i) {
    archive.read(std::to_string(i), read[i]);
    if (!read[i].sizes().equals(into[i].sizes()))
      throw std::invalid_argument("the checkpoint's tensor " + std::to_string(i) + " has shape " +
                                  c10::str(read[i].sizes()) + ", not " + c10::str(into[i].sizes()));
  }
  at::NoGradGuard no_grad;  // nothing of the whole file is applied unless all of it fits
  for (size_t i = 0; i < into.size(); ++i) const_cast<at::Tensor&>(into[i]).copy_(read[i]);
}

}  // namespace castor::detail
