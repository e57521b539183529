// Note [Flags]: parsing with Boost.Program_options, and the rules it needs
// on top (F2, F3).
#include "apps/common/flags.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include <boost/program_options/errors.hpp>

namespace castor::apps {
namespace {

// F3: unix style without guessing a flag from its prefix.
constexpr int kStyle = po::command_line_style::unix_style & ~po::command_line_style::allow_guessing;

// The declaration of the flag `token` names ("--epochs", "--epochs=3",
// "-n"), or nullptr.
const po::option_description* declaration(const po::options_description& declared, const std::string& token) {
  if (token.rfind("--", 0) == 0) return declared.find_nothrow(token.substr(2, token.find('=') - 2), false);
  if (token.size() >= 2 && token[0] == '-') return declared.find_nothrow(token.substr(0, 2), false);
  return nullptr;
}

// F2: what parse_flags refuses, as the user typed it (Program_options names
// neither a stray argument nor a short flag as given).
[[noreturn]] void refuse_unexpected(const po::options_description& declared, const std::vector<std::string>& args,
                                    size_t operands) {
  po::parsed_options parsed(&declared);
  try {
    parsed = po::command_line_parser(args).options(declared).style(kStyle).allow_unregistered().run();
  } catch (const po::error& e) {
    throw std::invalid_argument(e.what());
  }
  size_t seen = 0;
  for (const auto& o : parsed.options) {
    if (o.unregistered && !o.original_tokens.empty()) {
      const auto& token = o.original_tokens.front();
      throw std::invalid_argument("unknown flag " + token.substr(0, token.find('=')) + " (see --help)");
    }
    if (o.position_key >= 0 && ++seen > operands && !o.original_tokens.empty())
      throw std::invalid_argument("unexpected argument '" + o.original_tokens.front() + "'" +
                                  (operands == 0 ? ": only flags are taken" : "") + " (see --help)");
  }
  throw std::invalid_argument("unexpected argument (see --help)");
}

}  // namespace

po::options_description command_flags(const std::string& caption) {
  po::options_description flags(caption, 100, 50);
  flags.add_options()("help,h", "this text");
  return flags;
}

Flags parse_flags(const po::options_description& declared, const std::vector<std::string>& args,
                  const std::vector<std::string>& operands) {
  po::options_description all;
  all.add(declared);
  po::positional_options_description positional;
  for (const auto& name : operands) {
    all.add_options()(name.c_str(), po::value<std::string>(), "");
    positional.add(name.c_str(), 1);
  }
  try {
    auto parsed = po::command_line_parser(args).options(all).positional(positional).style(kStyle).run();
    for (const auto& o : parsed.options)  // an operand's name is not a flag
      if (o.position_key < 0 && std::find(operands.begin(), operands.end(), o.string_key) != operands.end())
        throw std::invalid_argument("unknown flag --" + o.string_key + " (see --help)");
    po::variables_map values;
    po::store(parsed, values);
    po::notify(values);
    return Flags(std::move(values));
  } catch (const po::unknown_option&) {
    refuse_unexpected(declared, args, operands.size());
  } catch (const po::too_many_positional_options_error&) {
    refuse_unexpected(declared, args, operands.size());
  } catch (const po::error& e) {
    throw std::invalid_argument(e.what());
  }
}

std::pair<std::vector<std::string>, std::vector<std::string>> split_flags(const po::options_description& declared,
                                                                          const std::vector<std::string>& args) {
  std::pair<std::vector<std::string>, std::vector<std::string>> out;
  try {
    auto parsed = po::command_line_parser(args)
                      .options(declared)
                      .style(kStyle)
                      .allow_unregistered()
                      .run();
    for (const auto& o : parsed.options) {
      auto& to = (o.unregistered || o.position_key >= 0) ? out.second : out.first;
      to.insert(to.end(), o.original_tokens.begin(), o.original_tokens.end());
    }
  } catch (const po::error& e) {
    throw std::invalid_argument(e.what());
  }
  return out;
}

size_t leading_flags(const po::options_description& declared, const std::vector<std::string>& args) {
  size_t i = 0;
  while (i < args.size() && args[i].size() > 1 && args[i][0] == '-') {
    const auto* d = declaration(declared, args[i]);
    if (!d) throw std::invalid_argument("unknown flag " + args[i].substr(0, args[i].find('=')) + " (see --help)");
    bool joined = args[i].find('=') != std::string::npos || (args[i][1] != '-' && args[i].size() > 2);
    i += (d->semantic()->max_tokens() == 0 || joined) ? 1 : 2;
  }
  return std::min(i, args.size());
}

std::string flags_help(const po::options_description& declared) {
  std::ostringstream out;
  out << declared;
  auto text = out.str();
  if (!text.empty() && text.back() != '\n') text += '\n';
  return text;
}

std::string shown(double value) {
  std::ostringstream out;
  out << value;  // 6 significant digits
  return out.str();
}

}  // namespace castor::apps
