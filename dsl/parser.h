// The .mks parser: recursive descent over the lexer's tokens, building a Module. On a syntax error
// it reports, skips to the next item keyword (or the closing brace) and goes on, so one run lists
// every mistake of a file; errors that merely follow from the first one are suppressed until the
// parser is back in step. Nesting of expressions and loops is bounded, so no input can exhaust the
// stack: neither the parser's, nor that of any later walk over an expression tree (evaluation,
// copies, the JSON dump), which recurses at most kMaxExprHeight deep.
#pragma once

#include <memory>

#include "dsl/ast.h"
#include "dsl/diagnostics.h"
#include "dsl/source.h"

namespace mkc::dsl {

// Parses a whole file. Never throws for bad input: everything wrong is in `diags`.
Module parse(std::shared_ptr<const SourceFile> file, Diagnostics& diags);

// The most deeply expressions (parentheses, unary operators, calls) and loops may nest.
inline constexpr int kMaxExprDepth = 128;
inline constexpr int kMaxLoopDepth = 8;
// The tallest expression tree (Expr::height): every operator is a level, so a chain of binary
// operators (`1 + 2 + ... + 1000`) is as tall as it is long. Ordinary sums of hundreds of terms
// fit; a chain long enough to exhaust a stack when walked does not.
inline constexpr int kMaxExprHeight = 1024;

}  // namespace mkc::dsl
