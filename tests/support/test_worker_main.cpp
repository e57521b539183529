// castor_test_worker: one worker in its own process, for tests that kill
// peers or need separate processes. Usage: castor_test_worker RANK WORLD MASTER_PORT
#include <cstdio>
#include <cstdlib>

#include "support/cluster.hpp"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s RANK WORLD_SIZE MASTER_PORT\n", argv[0]);
    return 2;
  }
  try {
    auto opts = castor::test::local_options(std::atoi(argv[1]), std::atoi(argv[2]), uint16_t(std::atoi(argv[3])));
    auto w = castor::init_rpc(opts);
    w.shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "castor_test_worker: %s\n", e.what());
    return 1;
  }
}
