//===- TextLimitsTest.cpp - Checks of an input's text before parsing ------===//
#include "mfsdp/graph/TextLimits.h"

#include <gtest/gtest.h>

#include <string>

using namespace mfsdp::graph;

namespace {

TEST(TextLimits, JsonNestingStopsAtTheLimit) {
  // 64 levels are read; the 65th opening is the place named.
  std::string ok = std::string(63, '[') + "{}" + std::string(63, ']');
  EXPECT_FALSE(checkJsonText(ok));
  std::string deep = "\n " + std::string(65, '[') + std::string(65, ']');
  std::optional<TextProblem> p = checkJsonText(deep);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->line, 2);
  EXPECT_EQ(p->column, 2 + 64);
  EXPECT_NE(p->message.find("deeper than 64 levels"), std::string::npos);
  // A million levels take no stack: the scan is iterative.
  std::string huge = std::string(1000000, '[');
  EXPECT_TRUE(checkJsonText(huge));
}

TEST(TextLimits, DuplicateKeysPerObjectAfterUnescaping) {
  // The same key in two objects is fine; twice in one is not, also when
  // one spelling is escaped (a reader unescapes before comparing).
  EXPECT_FALSE(checkJsonText(R"({"a": {"b": 1}, "c": {"b": 2}})"));
  EXPECT_FALSE(checkJsonText(R"({"a": "a", "b": ["a", "a"]})")); // values
  std::optional<TextProblem> p = checkJsonText(R"({"ab": 1, "a\u0062": 2})");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->column, 11);
  EXPECT_NE(p->message.find("duplicate key 'ab'"), std::string::npos);
  // After a nested object closes, its parent's keys are still counted.
  EXPECT_TRUE(checkJsonText(R"({"x": {"y": 1}, "x": 2})"));
}

TEST(TextLimits, NumbersBeyondADouble) {
  EXPECT_FALSE(checkJsonText("[1e308, -1.5e-400, 123456789012345678901234567890]"));
  std::optional<TextProblem> p = checkJsonText("[1, -1e400]");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->column, 5);
  EXPECT_NE(p->message.find("number -1e400 is out of range"), std::string::npos);
  // Digits inside strings are not numbers.
  EXPECT_FALSE(checkJsonText(R"(["1e400"])"));
}

TEST(TextLimits, MlirNestingSkipsStringsAndComments) {
  std::string nested;
  for (int i = 0; i < 10; ++i)
    nested += "module {\n";
  EXPECT_FALSE(checkMlirNesting(nested, 10));
  std::optional<TextProblem> p = checkMlirNesting(nested + "module {\n", 10);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->line, 11);
  EXPECT_EQ(p->column, 8);
  // Brackets in a string or a comment, and the arrow's '>', do not count.
  EXPECT_FALSE(checkMlirNesting("// ((((((((((((\n\"{{{{{{{{{{{{\\\"{{{{\" (a) -> (b)", 3));
  EXPECT_FALSE(checkMlirNesting("f(x) -> (y) -> (z) -> tensor<4xf32>", 2));
  // Types nest too.
  EXPECT_TRUE(checkMlirNesting("tensor<tensor<tensor<f32>>>", 2));
  // Bytecode is not text.
  EXPECT_FALSE(checkMlirNesting(std::string("ML\xEFR") + std::string(100, '{'), 3));
}

TEST(TextLimits, MlirNestingAtTheEdges) {
  // A string ends at its line's end; an escaped quote does not end it.
  EXPECT_FALSE(checkMlirNesting("\"a\\\"{{{{\n{", 1));
  std::optional<TextProblem> p = checkMlirNesting("\"a\\\"{{{{\n{{", 1);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->line, 2);
  EXPECT_EQ(p->column, 2);
  // Text that ends inside a string, on an escape or in a comment.
  EXPECT_FALSE(checkMlirNesting("{\"abc", 1));
  EXPECT_FALSE(checkMlirNesting("{\"abc\\", 1));
  EXPECT_FALSE(checkMlirNesting("{// {{{{", 1));
  // The first byte, and a problem after strings and comments on the line.
  p = checkMlirNesting("[", 0);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->line, 1);
  EXPECT_EQ(p->column, 1);
  p = checkMlirNesting("// x\n\"((\" // ((\n  a(\"<\" b(", 1);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->line, 3);
  EXPECT_EQ(p->column, 10);
}

TEST(TextLimits, BriefEscapesAndCuts) {
  EXPECT_EQ(brief("b\0x", 80), "b");                    // a C string stops at NUL
  EXPECT_EQ(brief(std::string("b\0x", 3)), "b\\x00x");
  EXPECT_EQ(brief(std::string(100, 'a'), 4), "aaaa... (100 bytes in all)");
}

} // namespace
