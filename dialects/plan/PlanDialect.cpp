//===- PlanDialect.cpp - The plan dialect ---------------------------------===//
#include "dialects/plan/PlanDialect.h"
#include "dialects/FastText.h"
#include "dialects/plan/PlanOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

using namespace mlir;
using namespace mfsdp::plan;

#include "dialects/plan/PlanOpsDialect.cpp.inc"
#include "dialects/plan/PlanEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/plan/PlanAttrs.cpp.inc"

void PlanDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/plan/PlanOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/plan/PlanAttrs.cpp.inc"
      >();
}

Attribute PlanDialect::parseAttribute(DialectAsmParser &parser, Type type) const {
  // The attribute's whole text ("kernel<...>"): an attribute without a type
  // is that text's alone, unless the text names an alias (`#a`, `!t`),
  // which another module parsed in the same context may define otherwise.
  const StringRef spec = parser.getFullSymbolSpec();
  const bool keyed = !type && spec.find_first_of("#!") == StringRef::npos;
  if (keyed) {
    std::lock_guard<std::mutex> lock(parsedAttrsMutex);
    auto it = parsedAttrs.find(spec);
    if (it != parsedAttrs.end())
      return it->second;
  }
  const SMLoc at = parser.getCurrentLocation();
  StringRef mnemonic;
  Attribute attr;
  OptionalParseResult parsed = generatedAttributeParser(parser, &mnemonic, type, attr);
  if (!parsed.has_value()) {
    parser.emitError(at) << "unknown attribute `" << mnemonic << "` in dialect `"
                         << getNamespace() << "`";
    return {};
  }
  // At most a few thousand texts are kept: the ones that repeat come
  // early, and a graph whose every parameter has its own text (an owner
  // rank each, say) keeps the memory it would have without the table.
  constexpr unsigned kMaxKept = 4096;
  if (succeeded(*parsed) && attr && keyed) {
    std::lock_guard<std::mutex> lock(parsedAttrsMutex);
    if (parsedAttrs.size() < kMaxKept)
      parsedAttrs.try_emplace(spec, attr);
  }
  return attr;
}

void PlanDialect::printAttribute(Attribute attr, DialectAsmPrinter &printer) const {
  (void)generatedAttributePrinter(attr, printer);
}

void PlanDialect::printCachedAttr(raw_ostream &os, Attribute attr) const {
  std::lock_guard<std::mutex> lock(attrTextMutex);
  auto [it, inserted] = attrText.try_emplace(attr);
  if (inserted) {
    llvm::raw_string_ostream text(it->second);
    attr.print(text);
  }
  os << it->second;
}

namespace {
/// The shortest form of a non-integral double (formatF64), searched for.
std::string shortestF64(double value);
} // namespace

namespace {
/// formatF64's text for `value`: in `buf` for an integral value, else in a
/// per-thread cache (valid until the thread's next call).
llvm::StringRef f64Text(double value, char (&buf)[32]) {
  if (std::isnan(value))
    return "nan";
  if (std::isinf(value))
    return value > 0 ? "inf" : "-inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    // What "%.0f" writes: the integer, and "-0" for negative zero.
    if (value == 0 && std::signbit(value))
      return "-0";
    auto r = std::to_chars(buf, buf + sizeof(buf), static_cast<int64_t>(value));
    return llvm::StringRef(buf, static_cast<size_t>(r.ptr - buf));
  }
  // The same few values recur on every parameter (its optimizer's
  // hyperparameters): each form is searched for once.
  return mfsdp::fasttext::textByBits(value, [](double v) { return shortestF64(v); });
}
} // namespace

std::string mfsdp::plan::formatF64(double value) {
  char buf[32];
  return f64Text(value, buf).str();
}

namespace {
std::string shortestF64(double value) {
  char buf[64];
  // The shortest %g precision that reads back to the same double. No
  // precision below the digits of the shortest round-trip form
  // (std::to_chars) can, so the search starts there (usually ending there).
  int first = 1;
  {
    char shortest[64];
    auto r = std::to_chars(shortest, shortest + sizeof(shortest), value,
                           std::chars_format::scientific);
    if (r.ec == std::errc()) {
      int digits = 0;
      for (const char *c = shortest; c < r.ptr && *c != 'e'; ++c)
        digits += *c >= '0' && *c <= '9';
      first = std::clamp(digits, 1, 17);
    }
  }
  for (int prec = first; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*g", prec, value);
    if (std::strtod(buf, nullptr) == value)
      break;
  }
  // MLIR's float literals need a '.' before the exponent ("1.0e-08").
  std::string out = buf;
  size_t e = out.find('e');
  if (e != std::string::npos && out.find('.') == std::string::npos)
    out.insert(e, ".0");
  return out;
}
} // namespace

FailureOr<F64> mfsdp::plan::parseF64(AsmParser &parser) {
  // printF64 writes integral values without a dot ("4096"); MLIR's float
  // parser rejects those, so take integers first.
  double sign = succeeded(parser.parseOptionalMinus()) ? -1.0 : 1.0;
  int64_t integral = 0;
  OptionalParseResult asInt = parser.parseOptionalInteger(integral);
  if (asInt.has_value()) {
    if (failed(*asInt))
      return failure();
    return F64(sign * static_cast<double>(integral));
  }
  double value = 0;
  if (parser.parseFloat(value))
    return failure();
  return F64(sign * value);
}

void mfsdp::plan::printF64(AsmPrinter &printer, double value) {
  char buf[32];
  printer.getStream() << f64Text(value, buf);
}
