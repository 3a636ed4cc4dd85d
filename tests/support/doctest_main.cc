// The main() of every mkc test binary (doctest), plus a listener that writes a JUnit XML report to
// $XML_OUTPUT_FILE when Bazel sets it. Bazel keeps that file as the target's test.xml, so the
// counts CI prints (tools/test.sh) are per test case, including the ones skipped for want of a GPU.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        // XML 1.0 forbids most control characters; keep the report parseable.
        out += (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') ? '?' : c;
    }
  }
  return out;
}

class JunitListener : public doctest::IReporter {
 public:
  explicit JunitListener(const doctest::ContextOptions&) {}

  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {
    const char* path = std::getenv("XML_OUTPUT_FILE");
    if (path == nullptr || *path == '\0') return;
    std::ofstream f(path);
    int failures = 0;
    int skipped = 0;
    for (const Case& c : cases_) {
      failures += c.failed ? 1 : 0;
      skipped += c.skipped ? 1 : 0;
    }
    f << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n"
      << "<testsuite name=\"mkc\" tests=\"" << cases_.size() << "\" failures=\"" << failures
      << "\" skipped=\"" << skipped << "\">\n";
    for (const Case& c : cases_) {
      f << "  <testcase name=\"" << xml_escape(c.name) << "\" time=\"" << c.seconds << "\"";
      if (c.failed) {
        f << "><failure message=\"" << xml_escape(c.message) << "\"/></testcase>\n";
      } else if (c.skipped) {
        f << "><skipped/></testcase>\n";
      } else {
        f << "/>\n";
      }
    }
    f << "</testsuite>\n</testsuites>\n";
  }
  void test_case_start(const doctest::TestCaseData& tc) override {
    current_ = Case{tc.m_name, 0, false, false, {}};
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats& st) override {
    current_.seconds = st.seconds;
    current_.failed = !st.testCaseSuccess;
    cases_.push_back(current_);
  }
  void test_case_exception(const doctest::TestCaseException& e) override {
    current_.message += std::string("exception: ") + e.error_string.c_str() + "\n";
  }
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData& a) override {
    if (!a.m_failed) return;
    current_.message +=
        std::string(a.m_file) + ":" + std::to_string(a.m_line) + ": " + a.m_expr + "\n";
  }
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData& tc) override {
    cases_.push_back(Case{tc.m_name, 0, false, true, {}});
  }

 private:
  struct Case {
    std::string name;
    double seconds;
    bool failed;
    bool skipped;
    std::string message;
  };
  Case current_{};
  std::vector<Case> cases_;
};

REGISTER_LISTENER("mkc_junit", 1, JunitListener);

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
