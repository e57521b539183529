// IDX reader: big-endian header (magic, dimensions), then raw uint8 data.
#include "fashion_mnist.hpp"

#include <zlib.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

#include <ATen/ATen.h>

namespace castor::apps {
namespace {

constexpr uint32_t kImagesMagic = 2051;  // 0x00000803: uint8, 3 dimensions
constexpr uint32_t kLabelsMagic = 2049;  // 0x00000801: uint8, 1 dimension
// Larger than any split of the data set: a forged count must not allocate.
constexpr uint32_t kMaxSamples = 1'000'000;

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw std::runtime_error("fashion-mnist: " + path + ": " + why);
}

std::vector<uint8_t> read_gzip(const std::string& path) {
  gzFile f = ::gzopen(path.c_str(), "rb");
  if (!f) fail(path, "cannot open (is the Debian package dataset-fashion-mnist installed?)");
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  for (;;) {
    int n = ::gzread(f, buf, sizeof(buf));
    if (n < 0) {
      int code = 0;
      std::string msg = ::gzerror(f, &code);
      ::gzclose(f);
      fail(path, "corrupt gzip stream (" + msg + ")");
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  ::gzclose(f);
  return out;
}

uint32_t big_endian(const std::vector<uint8_t>& b, size_t at) {
  return uint32_t(b[at]) << 24 | uint32_t(b[at + 1]) << 16 | uint32_t(b[at + 2]) << 8 | uint32_t(b[at + 3]);
}

// Checks the header and returns the dimensions after the magic number.
std::vector<uint32_t> read_header(const std::vector<uint8_t>& bytes, const std::string& path, uint32_t magic,
                                  size_t dims) {
  size_t header = 4 * (1 + dims);
  if (bytes.size() < header) fail(path, "truncated header (" + std::to_string(bytes.size()) + " bytes)");
  if (big_endian(bytes, 0) != magic)
    fail(path, "bad magic number " + std::to_string(big_endian(bytes, 0)) + ", expected " + std::to_string(magic));
  std::vector<uint32_t> out;
  uint64_t elements = 1;
  for (size_t i = 0; i < dims; ++i) {
    out.push_back(big_endian(bytes, 4 * (1 + i)));
    elements *= out.back();
  }
  if (out[0] > kMaxSamples) fail(path, "implausible sample count " + std::to_string(out[0]));
  if (bytes.size() != header + elements)
    fail(path, "expected " + std::to_string(header + elements) + " bytes after decompression, found " +
                   std::to_string(bytes.size()) + " (truncated or corrupt)");
  return out;
}

}  // namespace

std::string default_fashion_mnist_dir() {
  if (const char* env = std::getenv("CASTOR_FASHION_MNIST_DIR"); env && *env) return env;
  return "/usr/share/datasets/fashion-mnist";
}

Dataset load_fashion_mnist(const std::string& split, const std::string& dir, int64_t limit) {
  if (split != "train" && split != "t10k")
    throw std::invalid_argument("fashion-mnist: unknown split '" + split + "' (train or t10k)");
  auto images_path = dir + "/" + split + "-images-idx3-ubyte.gz";
  auto labels_path = dir + "/" + split + "-labels-idx1-ubyte.gz";
  auto images = read_gzip(images_path);
  auto labels = read_gzip(labels_path);
  auto idims = read_header(images, images_path, kImagesMagic, 3);
  auto ldims = read_header(labels, labels_path, kLabelsMagic, 1);
  if (idims[1] != 28 || idims[2] != 28)
    fail(images_path, "images are " + std::to_string(idims[1]) + "x" + std::to_string(idims[2]) + ", expected 28x28");
  if (idims[0] != ldims[0])
    fail(labels_path, std::to_string(ldims[0]) + " labels for " + std::to_string(idims[0]) + " images");
  int64_t n = idims[0];
  if (limit > 0 && limit < n) n = limit;
  Dataset d;
  d.images = at::from_blob(images.data() + 16, {n, 784}, at::kByte).to(at::kFloat).div_(255.0);
  d.labels = at::from_blob(labels.data() + 8, {n}, at::kByte).to(at::kLong);
  if (n > 0 && d.labels.max().item<int64_t>() > 9) fail(labels_path, "a label is outside 0..9");
  return d;
}

const Dataset& cached_fashion_mnist(const std::string& split, const std::string& dir, int64_t limit) {
  static std::mutex mutex;
  static std::map<std::string, Dataset> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto key = split + "|" + dir + "|" + std::to_string(limit);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, load_fashion_mnist(split, dir, limit)).first;
  return it->second;
}

}  // namespace castor::apps
