"""mkc_test: a doctest test binary with mkc's main and JUnit listener, and mkc's Clang plugin.

gpu = True tags the target "gpu" (select with --test_tag_filters=gpu on a GPU machine); its cases
use GPU_TEST_CASE and are reported skipped where no GPU is present.
"""

load("@rules_cc//cc:defs.bzl", "cc_test")

def mkc_test(name, srcs, deps = [], gpu = False, tags = [], size = "small", data = [], **kwargs):
    cc_test(
        name = name,
        size = size,
        # mkc's Clang plugin in every test's runfiles (compiler/sema/clang_check.h finds it there):
        # a test that checks a schedule with device functions through the CLI parses them as
        # `mkc check` does.
        data = data + ["//compiler/clang:libmkc_clang.so"],
        # Self-contained binaries: tools/gpu_bundle.sh copies them to a GPU machine without Bazel.
        linkstatic = True,
        srcs = srcs,
        deps = deps + ["//tests/support:doctest_main", "//third_party/system:doctest"] +
               (["//tests/support:gpu"] if gpu else []),
        tags = tags + (["gpu"] if gpu else []),
        **kwargs
    )
