// The AST as JSON (`mkc check --emit=ast`): every node with its kind, fields and source location
// ("loc": "file:line:col").
#pragma once

#include <nlohmann/json.hpp>

#include "dsl/ast.h"

namespace mkc::dsl {

nlohmann::json to_json(const Module& m);
// An expression as the text a user would write (fully parenthesised binary operations).
std::string expr_to_string(const Expr& e);

}  // namespace mkc::dsl
