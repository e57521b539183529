// castor: distributed model-parallel training for C++. The one header users
// include; it brings in libtorch's C++ frontend (users write libtorch code).
#pragma once

#include <torch/torch.h>

#include "actors/current_worker.hpp"
#include "actors/errors.hpp"
#include "actors/future.hpp"
#include "actors/registry.hpp"
#include "actors/worker.hpp"
#include "actors/worker_options.hpp"
#include "rref/class_registry.hpp"
#include "rref/rref.hpp"
#include "engine/context.hpp"
#include "optimizer/dist_optimizer.hpp"
#include "optimizer/optimizer_spec.hpp"
#include "optimizer/remote_module.hpp"
