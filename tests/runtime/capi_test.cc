// The C API (runtime/capi.h, what libmkc.so exports to Python's ctypes): every call refuses null
// arguments with a message and a nonzero code instead of crashing, a missing file or a malformed
// define is a user error (exit code 1) with its message, and the error buffer is always terminated
// (even when too small).
#include "runtime/capi.h"

#include <doctest/doctest.h>

#include <string>

#include "support/error.h"

namespace {

TEST_CASE("capi: null arguments are refused with a message") {
  char err[256] = "unset";
  mkc_kernel* k = nullptr;
  CHECK(mkc_compile_file(nullptr, "", 1, &k, err, sizeof err) == mkc::kExitUserError);
  CHECK(std::string(err).find("null argument") != std::string::npos);
  CHECK(k == nullptr);
  CHECK(mkc_bind(nullptr, "X", 0, nullptr, err, sizeof err) == mkc::kExitUserError);
  CHECK(std::string(err).find("mkc_bind") != std::string::npos);
  void* data = nullptr;
  CHECK(mkc_data(nullptr, "X", 0, &data, err, sizeof err) == mkc::kExitUserError);
  CHECK(mkc_launch_async(nullptr, nullptr, err, sizeof err) == mkc::kExitUserError);
  CHECK(mkc_synchronize(nullptr, err, sizeof err) == mkc::kExitUserError);
  CHECK(mkc_trace(nullptr, "t.json", err, sizeof err) == mkc::kExitUserError);
  CHECK(std::string(err).find("mkc_trace") != std::string::npos);
  char paths[64];
  CHECK(mkc_paths(nullptr, paths, sizeof paths) == mkc::kExitUserError);
  mkc_free(nullptr);  // a no-op, like free(NULL)
}

TEST_CASE("capi: a missing file or a bad define is the caller's error, before any GPU is needed") {
  char err[1024];
  mkc_kernel* k = nullptr;
  CHECK(mkc_compile_file("no/such/file.mks", "", 1, &k, err, sizeof err) == mkc::kExitUserError);
  CHECK(std::string(err).find("no/such/file.mks") != std::string::npos);
  // A define that is not NAME=VALUE.
  CHECK(mkc_compile_file("samples/gemm.mks", "M", 1, &k, err, sizeof err) == mkc::kExitUserError);
  CHECK(std::string(err).find("M") != std::string::npos);
  CHECK(k == nullptr);
}

TEST_CASE("capi: a process group's compile refuses a place that is not in the job") {
  char err[1024];
  mkc_kernel* k = nullptr;
  const char* text = "schedule s {\n input X : f32[8]\n output Y : f32[8]\n}\n";
  const mkc_gather_fn gather = [](void*, const void*, size_t, void*) { return 0; };
  CHECK(mkc_compile_string_group("s.mks", text, "", 2, 2, 0, 1, 0, gather, nullptr, &k, err,
                                 sizeof err) == mkc::kExitUserError);
  CHECK(std::string(err).find("rank 2 of 2") != std::string::npos);
  CHECK(mkc_compile_string_group("s.mks", text, "", 0, 2, 1, 1, 0, gather, nullptr, &k, err,
                                 sizeof err) == mkc::kExitUserError);
  CHECK(std::string(err).find("local rank 1 of 1") != std::string::npos);
  CHECK(mkc_compile_string_group("s.mks", text, "", 0, 2, 0, 1, 0, nullptr, nullptr, &k, err,
                                 sizeof err) == mkc::kExitUserError);
  CHECK(std::string(err).find("null argument") != std::string::npos);
  CHECK(k == nullptr);
  CHECK(mkc_abi_version() == MKC_ABI_VERSION);
  CHECK(MKC_ABI_VERSION == 4);
}

TEST_CASE("capi: mkc_tune refuses null and out-of-range arguments with the message") {
  char err[256];
  char progress[64] = "untouched";
  double us = -1;
  CHECK(mkc_tune(nullptr, 6, 600, 20, &us, progress, sizeof progress, err, sizeof err) ==
        mkc::kExitUserError);
  CHECK(std::string(err).find("mkc_tune: null argument") != std::string::npos);
  CHECK(std::string(progress).empty());  // no measurement, no line
  CHECK(us == -1);
  // The ranges are checked before the kernel is looked at.
  mkc_kernel* fake = reinterpret_cast<mkc_kernel*>(&us);
  CHECK(mkc_tune(fake, 0, 600, 20, &us, nullptr, 0, err, sizeof err) == mkc::kExitUserError);
  CHECK(std::string(err).find("candidates 0") != std::string::npos);
  CHECK(mkc_tune(fake, 6, 0, 20, &us, nullptr, 0, err, sizeof err) == mkc::kExitUserError);
  CHECK(std::string(err).find("budget_s 0") != std::string::npos);
  CHECK(mkc_tune(fake, 6, 600, 0, &us, nullptr, 0, err, sizeof err) == mkc::kExitUserError);
  CHECK(std::string(err).find("iters 0") != std::string::npos);
}

TEST_CASE("capi: a short error buffer gets a terminated prefix") {
  char err[8];
  mkc_kernel* k = nullptr;
  CHECK(mkc_compile_file("no/such/file.mks", "", 1, &k, err, sizeof err) != 0);
  CHECK(std::string(err).size() == sizeof err - 1);
}

}  // namespace
