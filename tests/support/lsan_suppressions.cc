// LeakSanitizer's suppressions for every mkc test binary (linked with doctest_main; read by the
// sanitizer runtime under --config=asan / san, ignored elsewhere).
//
// NVRTC 13 keeps 648 bytes it allocates inside nvrtcCompileProgram for some kernels (the split-K
// GEMM classes of codegen_test, 2026-12-06: every frame of the allocation is in libnvrtc), after
// the program is destroyed (jit/nvrtc.cc). Not mkc's memory; mkc's own leaks allocate from mkc
// frames and still report. Weak: a binary that gets doctest_main twice (its object and its PIC
// object) links one of them.
extern "C" __attribute__((weak)) const char* __lsan_default_suppressions() {
  return "leak:libnvrtc.so\n";
}
