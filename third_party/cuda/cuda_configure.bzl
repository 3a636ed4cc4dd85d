"""Repository rule exposing the local CUDA Toolkit ($CUDA_HOME, default /usr/local/cuda).

Provides :headers (cuda.h, nvrtc.h, CCCL) and :nvrtc (links libnvrtc with an rpath to the toolkit,
so binaries copied to another machine with the toolkit at the same place run unchanged). Nothing
here links libcuda.
"""

def _cuda_configure_impl(ctx):
    root = ctx.os.environ.get("CUDA_HOME", "/usr/local/cuda")
    for f in ["include/cuda.h", "include/nvrtc.h", "lib64/libnvrtc.so"]:
        if not ctx.path(root + "/" + f).exists:
            fail("CUDA Toolkit not found: %s/%s is missing. Install the toolkit or set CUDA_HOME " % (root, f) +
                 "(tools/setup.sh checks this).")
    ctx.symlink(root + "/include", "include")
    ctx.file("WORKSPACE", "workspace(name = \"cuda\")\n")
    ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "headers",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/cccl/**"]),
    includes = ["include"],
)

cc_library(
    name = "nvrtc",
    linkopts = ["-L{root}/lib64", "-lnvrtc", "-Wl,-rpath,{root}/lib64"],
    deps = [":headers"],
)

# The include directory NVRTC needs for libcu++ (<cuda/atomic>, <cuda/barrier>): an absolute path
# baked into the JIT as its default, overridable at run time with MKC_CUDA_INCLUDE.
genrule(
    name = "cuda_paths",
    outs = ["cuda_paths.h"],
    cmd = "echo '#define MKC_CUDA_HOME \\"{root}\\"' > $@",
)

cc_library(
    name = "paths",
    hdrs = [":cuda_paths.h"],
    include_prefix = "cuda_config",
)
""".format(root = root))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_HOME"],
    local = True,
)
