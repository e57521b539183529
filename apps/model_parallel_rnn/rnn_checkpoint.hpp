// What an RNN checkpoint's manifest holds beside the parts' files (Note
// [RNN failure] in rnn_app.cpp, RF3): the settings it was made with and the
// loss of every step it covers.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "apps/common/flags.hpp"
#include "apps/common/training_log.hpp"
#include "optimizer/checkpoint.hpp"

namespace castor::apps::rnn {

/// The settings a checkpoint must have been made with to be resumed: all
/// flags that shape the model, the data or the optimizer (`lr`: the one in
/// use), but the number of steps.
std::string rnn_settings(const Flags& args, double lr);

/// The manifest's meta for a checkpoint after the steps of `points`.
std::map<std::string, std::string> rnn_meta(const std::string& settings, const std::vector<CurvePoint>& points);

/// The points of the steps that `restored` covers (1 to its step);
/// CheckpointError when its losses are missing or damaged.
std::vector<CurvePoint> rnn_points(const CheckpointInfo& restored);

}  // namespace castor::apps::rnn
