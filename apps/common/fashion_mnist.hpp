// Fashion-MNIST from Debian's dataset-fashion-mnist: the gzipped IDX files,
// decompressed with zlib and checked before a single tensor is built.
#pragma once

#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

namespace castor::apps {

/// Where Debian puts the files; $CASTOR_FASHION_MNIST_DIR overrides it.
std::string default_fashion_mnist_dir();

struct Dataset {
  at::Tensor images;  // [N, 784] float32 in [0, 1]
  at::Tensor labels;  // [N] int64 in [0, 10)
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

/// Loads `split` ("train" or "t10k") from `dir`, the first `limit` samples
/// when limit > 0. Throws std::runtime_error naming the file for a missing,
/// truncated or malformed file (bad magic, bad sizes, labels out of range).
Dataset load_fashion_mnist(const std::string& split, const std::string& dir = default_fashion_mnist_dir(),
                           int64_t limit = -1);

/// The same, cached per process (trainers load once, not once per epoch).
const Dataset& cached_fashion_mnist(const std::string& split, const std::string& dir, int64_t limit);

}  // namespace castor::apps
