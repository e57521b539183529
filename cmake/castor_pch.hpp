// The one precompiled header shared by every castor target (REUSE_FROM): the
// heavy third-party headers, parsed once per build instead of once per file.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <torch/torch.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/jit/runtime/operator.h>
