// castor: distributed model-parallel training for C++. The one header users
// include; it brings in libtorch's C++ frontend (users write libtorch code).
#pragma once

#include <torch/torch.h>

#include "actors/api/current_worker.hpp"
#include "actors/api/errors.hpp"
#include "actors/api/future.hpp"
#include "actors/api/registry.hpp"
#include "actors/api/shared_memory.hpp"
#include "actors/api/worker.hpp"
#include "actors/api/worker_options.hpp"
#include "config/init_from_env.hpp"
#include "rref/class_registry.hpp"
#include "rref/mesh.hpp"
#include "rref/rref.hpp"
#include "engine/context.hpp"
#include "optimizer/checkpoint.hpp"
#include "optimizer/dist_optimizer.hpp"
#include "optimizer/optimizer_spec.hpp"
#include "optimizer/remote_module.hpp"
