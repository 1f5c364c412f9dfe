//===- TextLimits.h - What an input text may hold before it is parsed -*- C++ -*-===//
//
// Checks run over an input's raw text before a parser sees it, so that input
// no parser should meet is refused with its line and column instead of
// exhausting the stack or memory:
//  - JSON (model graphs, HF configs): nesting deeper than a limit (the
//    reader, the pointer index and nlohmann's copies recurse), a key given
//    twice in one object (nlohmann keeps the last one silently), a number
//    out of range of a 64-bit float (nlohmann reports it with no place).
//  - MLIR assembly: nesting of regions, attribute dictionaries, arrays and
//    types deeper than a limit (MLIR's parser, verifier and printer
//    recurse once per level; a few thousand levels exhaust an 8 MiB stack).
// Both scans are one pass, iterative, and tolerant of syntax errors: they
// report only what they check and leave every other error to the parser.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_GRAPH_TEXTLIMITS_H
#define MFSDP_GRAPH_TEXTLIMITS_H

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace mfsdp::graph {

/// What a scan found, and where (1-based).
struct TextProblem {
  int line = 0;
  int column = 0;
  std::string message;
};

/// The deepest JSON nesting the readers accept: the graph format needs 4
/// levels and an HF config.json fewer than 10.
constexpr int kMaxJsonDepth = 64;

/// The deepest MLIR nesting the tools accept (regions, `{}`, `[]`, `()` and
/// `<>` together); mfsdp's IR needs fewer than 10.
constexpr int kMaxMlirDepth = 1000;

/// The longest string a model graph or HF config may hold (names, dtypes,
/// kinds); a longer one is refused rather than echoed in diagnostics.
constexpr size_t kMaxNameBytes = 4096;

/// The first problem of `text` as JSON: nesting deeper than `maxDepth`, a
/// duplicate key (keys compared after unescaping), or a number that is not
/// finite as a 64-bit float. std::nullopt: none (which says nothing about
/// its syntax).
std::optional<TextProblem> checkJsonText(std::string_view text,
                                         int maxDepth = kMaxJsonDepth);

/// The first place where `text`, as MLIR assembly, nests deeper than
/// `maxDepth` (string literals and `//` comments skipped). MLIR bytecode
/// (its magic number first) is not scanned.
std::optional<TextProblem> checkMlirNesting(std::string_view text,
                                            int maxDepth = kMaxMlirDepth);

/// `s` for a diagnostic: control characters escaped (\xNN) and, past
/// `maxBytes`, cut with a note of its length.
std::string brief(std::string_view s, size_t maxBytes = 80);

} // namespace mfsdp::graph

#endif // MFSDP_GRAPH_TEXTLIMITS_H
