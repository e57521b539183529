// Counters that the test functions update, for assertions.
#pragma once

#include <atomic>
#include <cstdint>

namespace castor::test {
extern std::atomic<int64_t> finished_slow_calls;
}
