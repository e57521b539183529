// doctest's main for every castor test executable.
//
// CTest runs each test case alone (`--test-case=<name>`, from
// doctest_discover_tests). A name that matches nothing runs nothing and
// would pass: a ';' in a test case's name once split 18 names into halves
// (CMake lists), and none of those tests had run. So a run given a test-case
// filter that matches no test case fails, naming the filter.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

unsigned matched_test_cases = 0;
bool run_ended = false;

// Remembers how many test cases passed the filters; reports nothing else.
struct MatchCounter : doctest::IReporter {
  explicit MatchCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    matched_test_cases = stats.numTestCasesPassingFilters;
    run_ended = true;
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace

DOCTEST_REGISTER_LISTENER("castor_match_counter", 1, MatchCounter);

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  int result = context.run();
  if (context.shouldExit()) return result;
  std::string filter;
  for (int i = 1; i < argc; ++i)
    for (const char* flag : {"--test-case=", "-tc="})
      if (std::strncmp(argv[i], flag, std::strlen(flag)) == 0) filter = argv[i] + std::strlen(flag);
  if (run_ended && !filter.empty() && matched_test_cases == 0) {
    std::fprintf(stderr, "no test case matches --test-case=%s: nothing ran (is a ';' in its name?)\n", filter.c_str());
    return result == 0 ? 1 : result;
  }
  return result;
}
