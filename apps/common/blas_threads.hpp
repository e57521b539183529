// OpenBLAS's own thread pool. Debian's libtorch multiplies matrices in the
// pthreads build of OpenBLAS, whose pool `at::set_num_threads` does not
// reach: each process keeps one OpenBLAS thread per core, and idle ones
// spin in sched_yield between products (bench/README.md, "OpenBLAS's own
// threads").
#pragma once

namespace castor::apps {

/// Sets OpenBLAS's pool to `n` threads, if this process multiplies in
/// OpenBLAS (found at run time, so other BLAS builds are left alone).
/// Returns whether it did.
bool set_openblas_threads(int n);

/// OpenBLAS's pool size, or 0 if this process does not multiply in OpenBLAS.
int openblas_threads();

/// For a worker that shares its host's cores with other workers (a
/// pipeline stage, a parameter-server trainer or server): OpenBLAS's pool to one
/// thread, once per process. The pool's idle threads spin on the cores the
/// other workers need (bench/README.md, "OpenBLAS's own threads").
void keep_openblas_to_one_thread();

/// For a single-process reference (castor-bench's, beside a world whose
/// rank 0 keeps the pool to one thread in the same process): OpenBLAS's
/// whole pool, a thread per core, while it lives, as a process of its own
/// would have; the pool as it was after.
class WholeOpenblasPool {
 public:
  WholeOpenblasPool();
  ~WholeOpenblasPool();
  WholeOpenblasPool(const WholeOpenblasPool&) = delete;
  WholeOpenblasPool& operator=(const WholeOpenblasPool&) = delete;

 private:
  int before_;  // 0: no OpenBLAS here
};

}  // namespace castor::apps
