"""Runs python/tests/test_*.py with unittest and writes each case's outcome as JUnit XML to
$XML_OUTPUT_FILE (where Bazel keeps a test's test.xml), so tools/test.sh counts the cases one by
one. Exit 0 when every case passed or was skipped."""
import os
import sys
import unittest
from xml.etree import ElementTree as ET


class Recorder(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cases = []

    def addSuccess(self, test):
        super().addSuccess(test)
        self.cases.append((test.id(), None, None))

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.cases.append((test.id(), "failure", self._exc_info_to_string(err, test)))

    def addError(self, test, err):
        super().addError(test, err)
        self.cases.append((test.id(), "error", self._exc_info_to_string(err, test)))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.cases.append((test.id(), "skipped", reason))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    suite = unittest.defaultTestLoader.discover(here, pattern="test_*.py", top_level_dir=here)
    runner = unittest.TextTestRunner(resultclass=Recorder, verbosity=2)
    result = runner.run(suite)
    out = os.environ.get("XML_OUTPUT_FILE")
    if out:
        suites = ET.Element("testsuites")
        s = ET.SubElement(suites, "testsuite", name="python", tests=str(len(result.cases)))
        for name, outcome, text in result.cases:
            case = ET.SubElement(s, "testcase", name=name)
            if outcome:
                ET.SubElement(case, outcome, message=(text or "")[:200]).text = text
        ET.ElementTree(suites).write(out, encoding="utf-8", xml_declaration=True)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
