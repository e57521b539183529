#include "apps/common/blas_threads.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <thread>

namespace castor::apps {

bool set_openblas_threads(int n) {
  // OpenBLAS's documented setter; libtorch loads OpenBLAS with global
  // symbols, so it is found without a handle of our own.
  using Setter = void (*)(int);
  static const auto setter = reinterpret_cast<Setter>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (!setter) return false;
  setter(n);
  return true;
}

int openblas_threads() {
  using Getter = int (*)();
  static const auto getter = reinterpret_cast<Getter>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return getter ? getter() : 0;
}

void keep_openblas_to_one_thread() {
  static const bool done = set_openblas_threads(1);
  (void)done;
}

WholeOpenblasPool::WholeOpenblasPool() : before_(openblas_threads()) {
  if (before_ > 0) set_openblas_threads(int(std::max(1u, std::thread::hardware_concurrency())));
}

WholeOpenblasPool::~WholeOpenblasPool() {
  if (before_ > 0) set_openblas_threads(before_);
}

}  // namespace castor::apps
