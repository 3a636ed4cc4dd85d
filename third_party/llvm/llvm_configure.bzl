"""Repository rule exposing Debian's LLVM 14 (libclang-cpp14-dev, llvm-14-dev; tools/setup.sh).

Provides :clang, Clang's libTooling headers and libraries with an rpath to them. Only mkc's Clang
plugin (compiler/clang, loaded with dlopen) depends on it: mkc and libmkc.so never link LLVM.
"""

def _llvm_configure_impl(ctx):
    root = ctx.os.environ.get("MKC_LLVM_ROOT", "/usr/lib/llvm-14")
    for f in ["include/clang/Tooling/Tooling.h", "include/llvm/Support/MemoryBuffer.h",
              "lib/libclang-cpp.so", "lib/libLLVM-14.so"]:
        if not ctx.path(root + "/" + f).exists:
            fail("LLVM 14 not found: %s/%s is missing. Install libclang-cpp14-dev and llvm-14-dev " % (root, f) +
                 "(tools/setup.sh does), or set MKC_LLVM_ROOT.")
    ctx.symlink(root + "/include", "include")
    ctx.file("WORKSPACE", "workspace(name = \"llvm\")\n")
    ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "clang",
    hdrs = glob([
        "include/clang/**/*.h",
        "include/clang/**/*.def",
        "include/clang/**/*.inc",
        "include/llvm/**/*.h",
        "include/llvm/**/*.def",
        "include/llvm/**/*.inc",
        "include/llvm-c/**/*.h",
        "include/clang-c/**/*.h",
    ]),
    includes = ["include"],
    defines = ["__STDC_CONSTANT_MACROS", "__STDC_FORMAT_MACROS", "__STDC_LIMIT_MACROS"],
    linkopts = ["-L{root}/lib", "-lclang-cpp", "-lLLVM-14", "-Wl,-rpath,{root}/lib"],
)
""".format(root = root))

llvm_configure = repository_rule(
    implementation = _llvm_configure_impl,
    environ = ["MKC_LLVM_ROOT"],
    local = True,
)
