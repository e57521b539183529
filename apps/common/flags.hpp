// Command-line flags, each declared once (Boost.Program_options).
//
// Note [Flags]
//  F1. Every flag of castor's commands and apps is declared once, with its
//      type, its default and its help line; `--help` is printed from those
//      declarations, so a flag cannot be taken and not listed, or listed
//      with another default than the one it has.
//  F2. An unknown flag, a missing value, a value of the wrong type, a flag
//      given twice and a stray argument are refused with a message naming
//      the flag, before any worker starts (castor run checks an app's flags
//      in the launcher, and each rank parses them again).
//  F3. No abbreviations: Program_options would take an unambiguous prefix
//      (--hid for --hidden); a typo must fail, not pick a flag.
//  F4. A flag that takes a value takes the next argument unless that is
//      itself a declared flag: --limit -1 is a negative number.
//  F5. An app's values are checked as well as their types (App::check:
//      ranges and choices) wherever its flags are parsed, so castor run and
//      castor launch refuse --micro-batches 0 as they refuse
//      --micro-batches x, before any worker starts.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/program_options/options_description.hpp>
#include <boost/program_options/parsers.hpp>
#include <boost/program_options/positional_options.hpp>
#include <boost/program_options/value_semantic.hpp>
#include <boost/program_options/variables_map.hpp>

namespace castor::apps {

namespace po = boost::program_options;

/// Flags parsed against their declarations.
class Flags {
 public:
  Flags() = default;
  explicit Flags(po::variables_map values) : values_(std::move(values)) {}

  /// The value of a flag declared with a default (or given): its declared type.
  template <class T>
  T get(const std::string& name) const {
    return values_[name].as<T>();
  }
  /// The value of a flag declared without a default, if it was given.
  template <class T>
  std::optional<T> find(const std::string& name) const {
    auto it = values_.find(name);
    if (it == values_.end() || it->second.empty()) return std::nullopt;
    return it->second.as<T>();
  }
  /// Whether the command line gave the flag (its default does not count).
  bool given(const std::string& name) const {
    auto it = values_.find(name);
    return it != values_.end() && !it->second.defaulted();
  }

 private:
  po::variables_map values_;
};

/// A command's flags, with --help; more are added with add_options().
po::options_description command_flags(const std::string& caption = "flags");

/// Parses `args` against `declared` (F2-F4). The arguments that are not
/// flags are the command's operands, one per name of `operands`, read as
/// strings under those names (never given as --name). Throws
/// std::invalid_argument whose message names the flag or argument.
Flags parse_flags(const po::options_description& declared, const std::vector<std::string>& args,
                  const std::vector<std::string>& operands = {});

/// Splits `args` as parse_flags would read them, keeping the tokens of each
/// option: those `declared` takes, and the others (in order).
std::pair<std::vector<std::string>, std::vector<std::string>> split_flags(const po::options_description& declared,
                                                                          const std::vector<std::string>& args);

/// How many leading tokens of `args` are flags of `declared` with their
/// values: the index of the first argument that is neither (a command's
/// target). Throws std::invalid_argument for a flag `declared` lacks.
size_t leading_flags(const po::options_description& declared, const std::vector<std::string>& args);

/// The help text of `declared`: one entry per flag (F1).
std::string flags_help(const po::options_description& declared);

/// A default as --help shows it: 0.1, not the 0.10000000000000001 that
/// Program_options prints for a double.
std::string shown(double value);

}  // namespace castor::apps
