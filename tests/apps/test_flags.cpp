// Note [Flags] (apps/common/flags.hpp), F1-F4, on the functions castor's
// commands parse with. The commands' own messages are in test_apps.cpp.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "apps/common/flags.hpp"
#include "support/errors.hpp"

using castor::apps::Flags;
using castor::apps::flags_help;
using castor::apps::leading_flags;
using castor::apps::parse_flags;
using castor::apps::split_flags;
using castor::test::contains;
using castor::test::error_of;
namespace po = castor::apps::po;

namespace {

po::options_description launcher_flags() {
  po::options_description d("flags");
  d.add_options()
      ("workers,n", po::value<int>()->value_name("N"), "worker processes")
      ("max-restarts", po::value<int>()->default_value(0)->value_name("N"), "restarts per worker")
      ("help,h", "this text");
  return d;
}

po::options_description app_flags() {
  po::options_description d("flags");
  d.add_options()
      ("epochs", po::value<int64_t>()->default_value(6)->value_name("N"), "epochs")
      ("limit", po::value<int64_t>()->default_value(-1)->value_name("N"), "samples")
      ("hidden", po::value<int64_t>()->default_value(128)->value_name("N"), "width")
      ("out", po::value<std::string>()->value_name("PREFIX"), "curves")
      ("compare", po::bool_switch(), "compare");
  return d;
}

std::string refusal(const po::options_description& d, const std::vector<std::string>& args) {
  return error_of<std::invalid_argument>([&] { parse_flags(d, args); });
}

}  // namespace

TEST_CASE("flags: typed values, defaults apart from what was given, negative numbers as values (F4)") {
  auto f = parse_flags(app_flags(), {"--epochs", "3", "--limit", "-1", "--out=run1", "--compare"});
  CHECK(f.get<int64_t>("epochs") == 3);
  CHECK(f.get<int64_t>("limit") == -1);
  CHECK(f.get<int64_t>("hidden") == 128);
  CHECK(f.given("epochs"));
  CHECK_FALSE(f.given("hidden"));  // its default
  CHECK(f.find<std::string>("out") == std::optional<std::string>("run1"));
  CHECK(f.get<bool>("compare"));
  auto none = parse_flags(app_flags(), {});
  CHECK_FALSE(none.find<std::string>("out").has_value());
  CHECK_FALSE(none.get<bool>("compare"));
}

TEST_CASE("flags: unknown, abbreviated, repeated, mistyped and stray arguments are refused, naming the flag (F2, F3)") {
  CHECK(refusal(app_flags(), {"--bogus", "1"}) == "unknown flag --bogus (see --help)");
  CHECK(refusal(app_flags(), {"--hid", "64"}) == "unknown flag --hid (see --help)");
  CHECK(refusal(app_flags(), {"--epochs", "1", "--epochs", "2"}) == "option '--epochs' cannot be specified more than once");
  CHECK(refusal(app_flags(), {"--epochs", "many"}) == "the argument ('many') for option '--epochs' is invalid");
  CHECK(refusal(app_flags(), {"--epochs"}) == "the required argument for option '--epochs' is missing");
  CHECK(refusal(app_flags(), {"--compare=yes"}) == "option '--compare' does not take any arguments");
  CHECK(refusal(app_flags(), {"--compare", "true"}) == "unexpected argument 'true': only flags are taken (see --help)");
  CHECK(refusal(app_flags(), {"-x"}) == "unknown flag -x (see --help)");  // as typed, not "--x"
  CHECK(refusal(app_flags(), {"--epochs", "5", "-3"}) == "unknown flag -3 (see --help)");
}

TEST_CASE("flags: a command's operands are read apart from its flags, and are not flags themselves") {
  auto d = castor::apps::command_flags();
  d.add_options()("local", po::bool_switch(), "here");
  auto f = parse_flags(d, {"--local", "job.json"}, {"file"});
  CHECK(f.find<std::string>("file") == std::optional<std::string>("job.json"));
  CHECK(f.get<bool>("local"));
  CHECK_FALSE(parse_flags(d, {}, {"file"}).find<std::string>("file").has_value());
  CHECK(error_of<std::invalid_argument>([&] { parse_flags(d, {"a.json", "b.json"}, {"file"}); }) ==
        "unexpected argument 'b.json' (see --help)");
  CHECK(error_of<std::invalid_argument>([&] { parse_flags(d, {"--file", "a.json"}, {"file"}); }) ==
        "unknown flag --file (see --help)");
  CHECK(parse_flags(d, {"--help"}, {"file"}).given("help"));
}

TEST_CASE("flags: a launcher's flags end where its program begins and the rest are the program's") {
  std::vector<std::string> run{"-n", "2", "--max-restarts=1", "./prog", "--epochs", "3", "-n", "5"};
  CHECK(leading_flags(launcher_flags(), run) == 3);
  CHECK(leading_flags(launcher_flags(), {"--help"}) == 1);
  CHECK(leading_flags(launcher_flags(), {"prog", "-n", "2"}) == 0);
  CHECK(leading_flags(launcher_flags(), {"-n"}) == 1);  // its missing value is parse_flags' to report
  CHECK(contains(error_of<std::invalid_argument>([] { leading_flags(launcher_flags(), {"--bogus", "prog"}); }), "unknown flag --bogus"));

  // The older form: the launcher's flags after the app's name.
  auto [ours, theirs] = split_flags(launcher_flags(), {"--epochs", "3", "--workers", "2", "--limit", "-1", "--out", "x"});
  CHECK(ours == std::vector<std::string>{"--workers", "2"});
  CHECK(theirs == std::vector<std::string>{"--epochs", "3", "--limit", "-1", "--out", "x"});
  CHECK(parse_flags(launcher_flags(), ours).get<int>("workers") == 2);
  CHECK(parse_flags(app_flags(), theirs).get<int64_t>("limit") == -1);
}

TEST_CASE("flags: the help is printed from the declarations, with their defaults (F1)") {
  auto help = flags_help(app_flags());
  CHECK(contains(help, "--epochs N (=6)"));
  CHECK(contains(help, "--limit N (=-1)"));
  CHECK(contains(help, "--out PREFIX"));
  CHECK(contains(flags_help(launcher_flags()), "-n [ --workers ] N"));
}

TEST_CASE("flags: a double's default is shown as people write it") {
  CHECK(castor::apps::shown(0.1) == "0.1");
  CHECK(castor::apps::shown(0.7) == "0.7");
  CHECK(castor::apps::shown(1e-05) == "1e-05");
}
