#include "dsl/ast_json.h"

#include <fmt/format.h>

namespace mkc::dsl {
namespace {

using nlohmann::json;

struct Printer {
  const SourceFile& file;

  std::string loc(Span s) const {
    const LineCol lc = file.line_col(s.begin);
    return fmt::format("{}:{}:{}", file.path(), lc.line, lc.col);
  }

  json expr(const Expr& e) const {
    json j;
    switch (e.kind) {
      case Expr::Kind::kInt:
        j = {{"int", e.int_value}};
        break;
      case Expr::Kind::kFloat:
        j = {{"float", e.float_value}};
        break;
      case Expr::Kind::kName:
        j = {{"name", e.name}};
        break;
      case Expr::Kind::kUnary:
        j = {{"unary", e.op}, {"operand", expr(e.args[0])}};
        break;
      case Expr::Kind::kBinary:
        j = {{"binary", e.op}, {"lhs", expr(e.args[0])}, {"rhs", expr(e.args[1])}};
        break;
      case Expr::Kind::kCall: {
        j = {{"call", e.name}, {"args", json::array()}};
        for (const Expr& a : e.args) j["args"].push_back(expr(a));
        break;
      }
    }
    j["loc"] = loc(e.span);
    return j;
  }

  json exprs(const std::vector<Expr>& es) const {
    json a = json::array();
    for (const Expr& e : es) a.push_back(expr(e));
    return a;
  }

  json operand(const Operand& o) const {
    json j;
    switch (o.kind) {
      case Operand::Kind::kName:
        j = {{"kind", "name"}, {"name", o.name}};
        break;
      case Operand::Kind::kPeerTensor:
        j = {{"kind", "peer_tensor"}, {"peer", expr(o.peer)}, {"name", o.name}};
        break;
      case Operand::Kind::kPeer:
        j = {{"kind", "peer"}, {"peer", expr(o.peer)}};
        break;
      case Operand::Kind::kExpr:
        j = {{"kind", "expr"}, {"expr", expr(o.expr)}};
        break;
    }
    if (!o.index.empty()) j["index"] = exprs(o.index);
    j["loc"] = loc(o.span);
    return j;
  }

  json item(const Item& it) const {
    return std::visit([&](const auto& n) { return node(n); }, it.node);
  }

  json node(const ParamDecl& p) const {
    return {
        {"item", "param"}, {"name", p.name}, {"value", expr(p.value)}, {"loc", loc(p.name_span)}};
  }
  json node(const TensorDecl& t) const {
    static const char* kinds[] = {"input", "output", "scratch"};
    return {{"item", "tensor"},
            {"kind", kinds[static_cast<int>(t.kind)]},
            {"name", t.name},
            {"dtype", t.dtype},
            {"shape", exprs(t.shape)},
            {"placement", t.placement == Placement::kSymmetric ? "symmetric" : "local"},
            {"loc", loc(t.span)}};
  }
  json node(const DeviceFn& f) const {
    json params = json::array();
    for (const DeviceParam& p : f.params) params.push_back({{"name", p.name}, {"type", p.type}});
    return {{"item", "device"},      {"name", f.name}, {"params", params},
            {"returns", f.ret_type}, {"body", f.body}, {"loc", loc(f.span)}};
  }
  json node(const OpDecl& op) const {
    json j = {{"item", op.comm ? "comm" : "compute"},
              {"name", op.name},
              {"op", op.op},
              {"inputs", json::array()},
              {"outputs", json::array()},
              {"named", json::object()},
              {"clauses", json::array()},
              {"loc", loc(op.span)}};
    for (const Operand& o : op.inputs) j["inputs"].push_back(operand(o));
    for (const Operand& o : op.outputs) j["outputs"].push_back(operand(o));
    for (const NamedArg& n : op.named) j["named"][n.key] = operand(n.value);
    for (const Clause& c : op.clauses) {
      json jc = {{"clause", c.name}, {"loc", loc(c.span)}};
      if (!c.args.empty()) jc["args"] = exprs(c.args);
      if (!c.word.empty()) jc["word"] = c.word;
      if (!c.deps.empty()) {
        jc["deps"] = json::array();
        for (const DepRef& d : c.deps) {
          json jd = {{"target", d.target}, {"granule", d.granule.empty() ? "all" : d.granule}};
          if (d.iteration) jd["iteration"] = expr(*d.iteration);
          jc["deps"].push_back(jd);
        }
      }
      j["clauses"].push_back(jc);
    }
    return j;
  }
  json node(const std::vector<RoleDecl>& roles) const {
    json j = {{"item", "roles"}, {"roles", json::object()}};
    for (const RoleDecl& r : roles) j["roles"][r.role] = expr(r.count);
    return j;
  }
  json node(const Loop& l) const {
    json j = {{"item", "loop"},     {"var", l.var},          {"begin", expr(l.begin)},
              {"end", expr(l.end)}, {"body", json::array()}, {"loc", loc(l.span)}};
    for (const Item& it : l.body) j["body"].push_back(item(it));
    return j;
  }
};

}  // namespace

nlohmann::json to_json(const Module& m) {
  Printer p{*m.file};
  json j = {{"file", m.file->path()}, {"schedules", json::array()}};
  for (const Schedule& s : m.schedules) {
    json js = {{"name", s.name}, {"loc", p.loc(s.span)}, {"items", json::array()}};
    if (s.ranks) {
      js["ranks"] = {{"name", s.ranks->name}};
      if (!s.ranks->per_node.empty()) js["ranks"]["per_node"] = s.ranks->per_node;
    }
    for (const Item& it : s.items) js["items"].push_back(p.item(it));
    j["schedules"].push_back(js);
  }
  return j;
}

std::string dump_json(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string expr_to_string(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kInt:
      return std::to_string(e.int_value);
    case Expr::Kind::kFloat:
      return fmt::format("{}", e.float_value);
    case Expr::Kind::kName:
      return e.name;
    case Expr::Kind::kUnary:
      return e.op + expr_to_string(e.args[0]);
    case Expr::Kind::kBinary:
      return fmt::format("({} {} {})", expr_to_string(e.args[0]), e.op, expr_to_string(e.args[1]));
    case Expr::Kind::kCall: {
      std::string s = e.name + "(";
      for (size_t i = 0; i < e.args.size(); ++i) s += (i ? ", " : "") + expr_to_string(e.args[i]);
      return s + ")";
    }
  }
  return "?";
}

}  // namespace mkc::dsl
