// Host-side conversion for rt::LocalJob: doubles to a buffer's element type and back (in parallel
// over the elements: a 256 MB tensor converts in a fraction of a second), and the uploads,
// downloads and poisoning that move those bytes to and from a rank's buffer.
#include "runtime/local_job_convert.h"

#include <fmt/format.h>

#include <cstring>

#include "runtime/local_job.h"
#include "runtime/local_job_internal.h"
#include "support/error.h"
#include "support/parallel.h"

namespace mkc::rt {

bool convertible(compiler::DType t) {
  switch (t) {
    case compiler::DType::kBf16:
    case compiler::DType::kF16:
    case compiler::DType::kF32:
    case compiler::DType::kF64:
    case compiler::DType::kI32:
    case compiler::DType::kI64:
      return true;
    default:
      return false;
  }
}

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);                   // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<unsigned char> encode_values(compiler::DType t, const std::vector<double>& values) {
  if (!convertible(t))
    throw UserError(fmt::format("uploading {} data is not supported yet", compiler::dtype_name(t)));
  const int eb = compiler::dtype_bytes(t);
  std::vector<unsigned char> bytes(values.size() * eb);
  parallel_for(static_cast<int64_t>(values.size()), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      unsigned char* p = bytes.data() + i * eb;
      switch (t) {
        case compiler::DType::kBf16: {
          const uint16_t h = to_bf16(static_cast<float>(values[i]));
          std::memcpy(p, &h, 2);
          break;
        }
        case compiler::DType::kF16: {
          const _Float16 h = static_cast<_Float16>(values[i]);
          std::memcpy(p, &h, 2);
          break;
        }
        case compiler::DType::kF32: {
          const float f = static_cast<float>(values[i]);
          std::memcpy(p, &f, 4);
          break;
        }
        case compiler::DType::kF64:
          std::memcpy(p, &values[i], 8);
          break;
        case compiler::DType::kI32: {
          const int32_t v = static_cast<int32_t>(values[i]);
          std::memcpy(p, &v, 4);
          break;
        }
        case compiler::DType::kI64: {
          const int64_t v = static_cast<int64_t>(values[i]);
          std::memcpy(p, &v, 8);
          break;
        }
        default:
          break;  // not convertible: refused above
      }
    }
  });
  return bytes;
}

std::vector<double> decode_values(compiler::DType t, const std::vector<unsigned char>& bytes) {
  if (!convertible(t))
    throw UserError(
        fmt::format("downloading {} data is not supported yet", compiler::dtype_name(t)));
  const int eb = compiler::dtype_bytes(t);
  std::vector<double> out(bytes.size() / eb);
  parallel_for(static_cast<int64_t>(out.size()), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const unsigned char* p = bytes.data() + i * eb;
      switch (t) {
        case compiler::DType::kBf16: {
          uint16_t h;
          std::memcpy(&h, p, 2);
          out[i] = from_bf16(h);
          break;
        }
        case compiler::DType::kF16: {
          _Float16 h;
          std::memcpy(&h, p, 2);
          out[i] = static_cast<double>(h);
          break;
        }
        case compiler::DType::kF32: {
          float f;
          std::memcpy(&f, p, 4);
          out[i] = f;
          break;
        }
        case compiler::DType::kF64:
          std::memcpy(&out[i], p, 8);
          break;
        case compiler::DType::kI32: {
          int32_t v;
          std::memcpy(&v, p, 4);
          out[i] = v;
          break;
        }
        case compiler::DType::kI64: {
          int64_t v;
          std::memcpy(&v, p, 8);
          out[i] = static_cast<double>(v);
          break;
        }
        default:
          break;  // not convertible: refused above
      }
    }
  });
  return out;
}

void LocalJob::upload(int rank, int buffer, const std::vector<double>& values) {
  const Driver& d = Driver::get();
  const plan::Buffer& b = plan_.buffers[buffer];
  const std::vector<unsigned char> bytes = encode_values(b.dtype, values);
  Rank& rk = local(rank, "upload");
  synchronize();
  CtxScope scope(d, rk.ctx);
  // On the rank's stream, waited for: the kernel runs on that (non-blocking) stream, which does
  // not wait for the legacy default stream's copies (a pageable copy may still be in flight when
  // cuMemcpyHtoD returns).
  MKC_CU(d, cuMemcpyHtoDAsync, address(rank, buffer), bytes.data(), bytes.size(), rk.stream);
  MKC_CU(d, cuStreamSynchronize, rk.stream);
}

std::vector<double> LocalJob::download(int rank, int buffer) {
  const Driver& d = Driver::get();
  const plan::Buffer& b = plan_.buffers[buffer];
  // Refused before anything is copied.
  if (!convertible(b.dtype)) return decode_values(b.dtype, {});
  std::vector<unsigned char> bytes(static_cast<size_t>(b.elements()) *
                                   compiler::dtype_bytes(b.dtype));
  {
    Rank& rk = local(rank, "download");
    synchronize();
    CtxScope scope(d, rk.ctx);
    MKC_CU(d, cuMemcpyDtoHAsync, bytes.data(), address(rank, buffer), bytes.size(), rk.stream);
    MKC_CU(d, cuStreamSynchronize, rk.stream);
  }
  return decode_values(b.dtype, bytes);
}

void LocalJob::poison(int rank, int buffer) {
  const Driver& d = Driver::get();
  const plan::Buffer& b = plan_.buffers[buffer];
  Rank& rk = local(rank, "poison");
  synchronize();
  CtxScope scope(d, rk.ctx);
  // On the rank's stream, waited for (a memset of device memory on the legacy default stream
  // returns before it is done, and the kernel's non-blocking stream does not wait for it: the
  // kernel's writes could be poisoned after the fact, the "unwritten" outputs seen once in the
  // seventh session and twice in the eighth).
  MKC_CU(d, cuMemsetD8Async, address(rank, buffer), 0xFF,
         static_cast<size_t>(b.elements()) * compiler::dtype_bytes(b.dtype), rk.stream);
  MKC_CU(d, cuStreamSynchronize, rk.stream);
}

}  // namespace mkc::rt
