#include "compiler/program.h"

#include <algorithm>

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
  switch (e.kind) {
    case dsl::Expr::Kind::kInt:
      return e.int_value;
    case dsl::Expr::Kind::kFloat:
      return static_cast<int64_t>(e.float_value);
    case dsl::Expr::Kind::kName: {
      if (e.name == "rank") return rank;
      auto it = s.params.find(e.name);
      if (it != s.params.end()) return it->second;
      if (s.ast && s.ast->ranks && e.name == s.ast->ranks->name) return s.ranks;
      if (s.ast && s.ast->ranks && e.name == s.ast->ranks->per_node) return s.ranks_per_node;
      MKC_CHECK(false, "name `{}` survived checking but has no value", e.name);
      return 0;
    }
    case dsl::Expr::Kind::kUnary: {
      const int64_t v = evaluate(e.args[0], rank, s);
      return e.op == "!" ? (v == 0) : -v;
    }
    case dsl::Expr::Kind::kCall: {
      const int64_t a = evaluate(e.args[0], rank, s), b = evaluate(e.args[1], rank, s);
      if (e.name == "min") return std::min(a, b);
      if (e.name == "max") return std::max(a, b);
      return (a + b - 1) / b;
    }
    case dsl::Expr::Kind::kBinary: {
      const int64_t a = evaluate(e.args[0], rank, s), b = evaluate(e.args[1], rank, s);
      const std::string& op = e.op;
      if (op == "+") return a + b;
      if (op == "-") return a - b;
      if (op == "*") return a * b;
      if (op == "/") return a / b;
      if (op == "%") return ((a % b) + b) % b;
      if (op == "<") return a < b;
      if (op == "<=") return a <= b;
      if (op == ">") return a > b;
      if (op == ">=") return a >= b;
      if (op == "==") return a == b;
      if (op == "!=") return a != b;
      if (op == "&&") return a && b;
      return a || b;
    }
  }
  MKC_CHECK(false, "unhandled expression kind");
  return 0;
}

}  // namespace mkc::compiler
