#include "runtime/verify.h"

#include <fmt/format.h>

#include <cmath>

#include "compiler/oracle/reference.h"
#include "runtime/device_fn_eval.h"
#include "support/error.h"
#include "support/parallel.h"

namespace mkc::rt {
namespace {

double quantize(double v, compiler::DType t) {
  switch (t) {
    case compiler::DType::kBf16:
      return from_bf16(to_bf16(static_cast<float>(v)));
    case compiler::DType::kF16:
      return static_cast<double>(static_cast<_Float16>(v));
    case compiler::DType::kF32:
      return static_cast<float>(v);
    default:
      return v;
  }
}

// Every user tensor of every rank drawn (the reference needs them all); on this process's ranks
// the inputs uploaded and the rest poisoned. Returns the host copy (inputs set, the rest NaN)
// that the reference evaluates.
std::vector<std::vector<std::vector<double>>> prepare(LocalJob& job, const plan::Plan& plan,
                                                      const plan::InputFn& inputs, int launch) {
  const compiler::CheckedSchedule& s = *plan.source;
  std::vector<std::vector<std::vector<double>>> host(job.ranks());
  for (int r = 0; r < job.ranks(); ++r) {
    plan::RankData data(plan.buffers.size());
    for (size_t b = 0; b < plan.buffers.size(); ++b)
      data[b].assign(plan.buffers[b].elements(), std::nan(""));
    inputs(r, launch, data);
    data.resize(s.tensors.size());
    for (size_t t = 0; t < s.tensors.size(); ++t) {
      const bool input = s.tensors[t].kind == dsl::TensorKind::kInput;
      if (input) {
        std::vector<double>& v = data[t];
        const compiler::DType dt = s.tensors[t].dtype;
        parallel_for(static_cast<int64_t>(v.size()), [&](int64_t e0, int64_t e1) {
          for (int64_t e = e0; e < e1; ++e) v[e] = quantize(v[e], dt);
        });
      }
      if (!job.is_local(r)) continue;
      if (input) {
        job.upload(r, static_cast<int>(t), data[t]);
      } else {
        job.poison(r, static_cast<int>(t));
      }
    }
    host[r] = std::move(data);
  }
  return host;
}

}  // namespace

double tolerance_for(compiler::DType t) {
  switch (t) {
    case compiler::DType::kBf16:
    case compiler::DType::kF16:
      return 1e-2;
    case compiler::DType::kF32:
      return 1e-4;
    default:
      return 0;
  }
}

void upload_random_inputs(LocalJob& job, const plan::Plan& plan, uint64_t seed) {
  prepare(job, plan, plan::random_inputs(plan, seed), 1);
}

void upload_inputs(LocalJob& job, const plan::Plan& plan, const plan::InputFn& inputs) {
  prepare(job, plan, inputs, static_cast<int>(job.launches()) + 1);
}

std::vector<TensorCheck> checked_launch(LocalJob& job, const plan::Plan& plan,
                                        const plan::HostFns& fns, uint64_t seed) {
  return checked_launch(job, plan, fns, plan::random_inputs(plan, seed));
}

std::vector<TensorCheck> checked_launch(LocalJob& job, const plan::Plan& plan,
                                        const plan::HostFns& fns, const plan::InputFn& inputs) {
  const compiler::CheckedSchedule& s = *plan.source;
  // Device functions the caller has no host version of run on this process's first GPU.
  const plan::BatchFns batch =
      job.local_ranks().empty()
          ? plan::BatchFns{}
          : gpu_device_functions(s, job.context(job.local_ranks().front()), fns);
  const int launch = static_cast<int>(job.launches()) + 1;
  std::vector<std::vector<std::vector<double>>> ref = prepare(job, plan, inputs, launch);
  job.launch();
  plan::reference(s, fns, batch, ref);
  std::vector<TensorCheck> out;
  for (int r : job.local_ranks()) {
    for (size_t t = 0; t < s.tensors.size(); ++t) {
      const std::vector<double> got = job.download(r, static_cast<int>(t));
      TensorCheck c;
      c.rank = r;
      c.tensor = s.tensors[t].name;
      c.tolerance = tolerance_for(s.tensors[t].dtype);
      // Per part of the tensor, summed in part order.
      struct Part {
        double num = 0, den = 0;
        int64_t unwritten = 0, inexact = 0;
      };
      const int64_t n = static_cast<int64_t>(got.size());
      std::vector<Part> parts(parallel_parts(n));
      const std::vector<double>& want_all = ref[r][t];
      const compiler::DType dt = s.tensors[t].dtype;
      parallel_parts_for(n, [&](int64_t part, int64_t e0, int64_t e1) {
        Part& p = parts[part];
        for (int64_t e = e0; e < e1; ++e) {
          const double want = want_all[e];
          if (std::isnan(want)) continue;
          if (std::isnan(got[e])) {
            ++p.unwritten;
            continue;
          }
          p.num += (got[e] - want) * (got[e] - want);
          p.den += want * want;
          if (got[e] != quantize(want, dt)) ++p.inexact;
        }
      });
      double num = 0, den = 0;
      for (const Part& p : parts) {
        num += p.num;
        den += p.den;
        c.unwritten += p.unwritten;
        c.inexact += p.inexact;
      }
      c.rel_error = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace mkc::rt
