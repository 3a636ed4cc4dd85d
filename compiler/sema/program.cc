#include "compiler/sema/program.h"

#include <algorithm>
#include <limits>

#include "compiler/sema/expr_eval.h"
#include "support/check.h"

namespace mkc::compiler {

const char* dtype_name(DType t) {
  switch (t) {
#define MKC_DT_NAME(e, name, bytes, is_float) \
  case DType::e:                              \
    return name;
    MKC_DTYPES(MKC_DT_NAME)
#undef MKC_DT_NAME
  }
  return "?";
}

int dtype_bytes(DType t) {
  switch (t) {
#define MKC_DT_BYTES(e, name, bytes, is_float) \
  case DType::e:                               \
    return bytes;
    MKC_DTYPES(MKC_DT_BYTES)
#undef MKC_DT_BYTES
  }
  return 0;
}

bool dtype_is_float(DType t) {
  switch (t) {
#define MKC_DT_FLOAT(e, name, bytes, is_float) \
  case DType::e:                               \
    return is_float;
    MKC_DTYPES(MKC_DT_FLOAT)
#undef MKC_DT_FLOAT
  }
  return false;
}

bool dtype_is_fp8(DType t) {
  return t == DType::kFp8E4m3 || t == DType::kFp8E5m2;
}

bool parse_dtype(const std::string& s, DType* out) {
#define MKC_DT_PARSE(e, name, bytes, is_float) \
  if (s == name) {                             \
    *out = DType::e;                           \
    return true;                               \
  }
  MKC_DTYPES(MKC_DT_PARSE)
#undef MKC_DT_PARSE
  return false;
}

std::vector<std::string> dtype_names() {
  return {
#define MKC_DT_LIST(e, name, bytes, is_float) name,
      MKC_DTYPES(MKC_DT_LIST)
#undef MKC_DT_LIST
  };
}

const char* op_name(OpKind k) {
  switch (k) {
#define MKC_OP_NAME(e, name, is_comm) \
  case OpKind::e:                     \
    return name;
    MKC_OPS(MKC_OP_NAME)
#undef MKC_OP_NAME
  }
  return "?";
}

bool op_is_comm(OpKind k) {
  switch (k) {
#define MKC_OP_COMM(e, name, is_comm) \
  case OpKind::e:                     \
    return is_comm;
    MKC_OPS(MKC_OP_COMM)
#undef MKC_OP_COMM
  }
  return false;
}

bool parse_op(const std::string& s, OpKind* out) {
#define MKC_OP_PARSE(e, name, is_comm) \
  if (s == name) {                     \
    *out = OpKind::e;                  \
    return true;                       \
  }
  MKC_OPS(MKC_OP_PARSE)
#undef MKC_OP_PARSE
  return false;
}

std::vector<std::string> op_names(bool comm) {
  std::vector<std::string> out;
#define MKC_OP_LIST(e, name, is_comm) \
  if (is_comm == comm) out.push_back(name);
  MKC_OPS(MKC_OP_LIST)
#undef MKC_OP_LIST
  return out;
}

int64_t Tensor::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t evaluate(const dsl::Expr& e, int64_t rank, const CheckedSchedule& s) {
  // After checking, every name has a value and no arithmetic fails: a failure here is a bug.
  class Scope final : public ExprScope {
   public:
    Scope(int64_t rank, const CheckedSchedule& s) : rank_(rank), s_(s) {}
    std::optional<int64_t> value_of(const dsl::Expr& e) override {
      if (e.name == "rank") return rank_;
      auto it = s_.params.find(e.name);
      if (it != s_.params.end()) return it->second;
      if (s_.ast && s_.ast->ranks && e.name == s_.ast->ranks->name) return s_.ranks;
      if (s_.ast && s_.ast->ranks && e.name == s_.ast->ranks->per_node) return s_.ranks_per_node;
      MKC_CHECK(false, "name `{}` survived checking but has no value", e.name);
      return std::nullopt;
    }
    void failed(const dsl::Expr&, EvalFailure f, int64_t a, int64_t b) override {
      MKC_CHECK(false, "an expression survived checking but fails ({}, operands {} and {})",
                static_cast<int>(f), a, b);
    }

   private:
    int64_t rank_;
    const CheckedSchedule& s_;
  };
  Scope scope(rank, s);
  const std::optional<int64_t> v = compiler::evaluate(e, scope);
  MKC_CHECK(v.has_value(), "an expression survived checking but has no value");
  return *v;
}

bool accumulates(const OpInstance& op) {
  auto it = op.ints.find("accumulate");
  return op.kind == OpKind::kAttention && it != op.ints.end() && it->second != 0;
}

int64_t causal_offset(const OpInstance& op, int64_t rank, const CheckedSchedule& s, int64_t Sq,
                      int64_t Sk) {
  const auto at = [&](const char* key) -> int64_t {
    auto it = op.per_rank.find(key);
    return it == op.per_rank.end() ? 0 : evaluate(it->second, rank, s);
  };
  const int64_t q = at("q_start"), k = at("k_start");
  // q - k without overflow: a difference past either end is clamped anyway.
  if (k < 0 && q > std::numeric_limits<int64_t>::max() + k) return Sk;
  if (k > 0 && q < std::numeric_limits<int64_t>::min() + k) return -Sq;
  return std::clamp<int64_t>(q - k, -Sq, Sk);
}

}  // namespace mkc::compiler
