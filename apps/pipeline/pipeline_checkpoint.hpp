// What a pipeline checkpoint's manifest holds beside the stages' files
// (Note [Pipeline failure] in pipeline.cpp, PF1 and PF5): the settings it
// was made with and the curve points of the epochs it covers.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "apps/common/training_log.hpp"
#include "apps/pipeline/pipeline.hpp"
#include "optimizer/checkpoint.hpp"

namespace castor::apps::pipeline {

/// The settings that a checkpoint must have been made with to be resumed:
/// all that shape the model or the arithmetic, but the number of epochs and
/// of micro-batches (which only cut a batch into parts).
std::string settings_of(const PipelineConfig& cfg);

/// The manifest's meta for a checkpoint after the epochs of `points`.
std::map<std::string, std::string> checkpoint_meta(const PipelineConfig& cfg, const std::vector<CurvePoint>& points);

/// The points of the epochs that `restored` covers (1 to its step);
/// CheckpointError when one is missing or damaged.
std::vector<CurvePoint> points_of(const CheckpointInfo& restored);

}  // namespace castor::apps::pipeline
