// The AST as JSON (`mkc check --emit=ast`): every node with its kind, fields and source location
// ("loc": "file:line:col").
#pragma once

#include <nlohmann/json.hpp>

#include "dsl/ast.h"

namespace mkc::dsl {

nlohmann::json to_json(const Module& m);
// JSON text for output. Source text may hold bytes that are not UTF-8 (a comment, a device body):
// those are replaced with U+FFFD instead of throwing.
std::string dump_json(const nlohmann::json& j, int indent = 2);

// An expression as the text a user would write (fully parenthesised binary operations).
std::string expr_to_string(const Expr& e);

}  // namespace mkc::dsl
