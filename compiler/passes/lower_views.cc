// Lowering: the views of tensor uses and the boxes tasks read and write in them.
//
// A view is what the device addresses (a buffer at a flat offset, with a shape); a box is what the
// dependency pass and the verifier compare (a range per dimension of the buffer). A view made
// here always has a tail of its buffer's shape, so the box of a view's sub-range is the view's
// index prefix (recovered exactly from the offset) followed by the range. Views the device sees
// reshaped (attention's [B * H, S, D]) take their boxes from the unreshaped view.
#include <fmt/format.h>

#include <algorithm>

#include "compiler/passes/lowerer.h"
#include "support/check.h"

namespace mkc::plan {

using compiler::OpInstance;
using compiler::TensorUse;

std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> grid(
    const std::vector<int64_t>& shape, std::vector<int64_t> sizes) {
  while (sizes.size() < shape.size()) sizes.insert(sizes.begin(), 1);
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> out;
  std::vector<int64_t> idx(shape.size(), 0);
  for (;;) {
    std::vector<int64_t> lo(shape.size()), hi(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) {
      lo[d] = idx[d] * sizes[d];
      hi[d] = std::min(shape[d], lo[d] + sizes[d]);
    }
    out.push_back({lo, hi});
    size_t d = shape.size();
    while (d > 0) {
      --d;
      if (++idx[d] < cdiv(shape[d], sizes[d])) break;
      idx[d] = 0;
      if (d == 0) return out;
    }
    if (shape.empty()) return out;
  }
}

void push_range(std::vector<int64_t>* args, const std::vector<int64_t>& lo,
                const std::vector<int64_t>& hi) {
  args->push_back(static_cast<int64_t>(lo.size()));
  args->insert(args->end(), lo.begin(), lo.end());
  args->insert(args->end(), hi.begin(), hi.end());
}

View Lowerer::view(const TensorUse& u, int64_t rank) const {
  const Buffer& b = plan_.buffers[u.tensor];
  int64_t offset = 0;
  for (size_t i = 0; i < u.index.size(); ++i) offset += u.index[i] * product(b.shape, i + 1);
  return View{static_cast<int>(rank), u.tensor, offset, u.shape};
}

View Lowerer::whole(int buffer, int64_t rank) const {
  return View{static_cast<int>(rank), buffer, 0, plan_.buffers[buffer].shape};
}

View Lowerer::slot(int buffer, int64_t rank, int64_t i) const {
  const std::vector<int64_t>& sh = plan_.buffers[buffer].shape;
  return View{static_cast<int>(rank), buffer, i * product(sh, 1),
              std::vector<int64_t>(sh.begin() + 1, sh.end())};
}

Box Lowerer::box(const View& v, std::vector<int64_t> lo, std::vector<int64_t> hi) const {
  const Buffer& b = plan_.buffers[v.buffer];
  while (lo.size() < v.shape.size()) {
    lo.push_back(0);
    hi.push_back(v.shape[lo.size() - 1]);
  }
  MKC_CHECK(v.shape.size() <= b.shape.size() && lo.size() == v.shape.size(),
            "a box of {} dims in a {}-dim view of the {}-dim buffer `{}`", lo.size(),
            v.shape.size(), b.shape.size(), b.name);
  const size_t lead = b.shape.size() - v.shape.size();
  MKC_CHECK(std::equal(v.shape.begin(), v.shape.end(), b.shape.begin() + lead),
            "view [{}] of `{}` [{}] is not a tail of its buffer's shape: its boxes are ambiguous",
            fmt::join(v.shape, ", "), b.name, fmt::join(b.shape, ", "));
  const int64_t tail = product(v.shape);
  MKC_CHECK(tail > 0 && v.offset % tail == 0,
            "view of `{}` at offset {} is not a slice of whole {}s", b.name, v.offset, tail);
  Box out;
  out.rank = v.rank;
  out.buffer = v.buffer;
  // The view's leading (indexed) dimensions: its index prefix, from the offset.
  int64_t rem = v.offset / tail;
  std::vector<int64_t> prefix(lead);
  for (size_t i = lead; i-- > 0;) {
    prefix[i] = rem % b.shape[i];
    rem /= b.shape[i];
  }
  for (size_t i = 0; i < lead; ++i) {
    out.lo.push_back(prefix[i]);
    out.hi.push_back(prefix[i] + 1);
  }
  out.lo.insert(out.lo.end(), lo.begin(), lo.end());
  out.hi.insert(out.hi.end(), hi.begin(), hi.end());
  return out;
}

std::vector<int64_t> Lowerer::chunk_sizes(const OpInstance& op, const std::vector<int64_t>& shape,
                                          int elem_bytes) const {
  if (!op.chunk.empty()) return op.chunk;
  std::vector<int64_t> sizes = shape;
  const int64_t row = product(shape, 1) * elem_bytes;
  sizes[0] =
      std::max<int64_t>(1, std::min<int64_t>(shape[0], (64 << 10) / std::max<int64_t>(1, row)));
  return sizes;
}

}  // namespace mkc::plan
