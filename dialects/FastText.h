//===- FastText.h - The hot ops' strings, symbols and floats -----*- C++ -*-===//
//
// Custom directives for what the plan and sched ops written in the hundreds
// of thousands print on every op: names (string properties), symbol
// references and their lists, i64 and f64 counts. Each prints exactly the
// text MLIR's generic printer would, without its per-attribute dispatch: a
// string or symbol that needs no quoting or escaping is written as it is
// (anything else goes through MLIR's own escaping), an integer as its
// digits, and a float's text is made by MLIR once per value and then
// reused. Each parses as the declarative format parses what it replaces.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_DIALECTS_FASTTEXT_H
#define MFSDP_DIALECTS_FASTTEXT_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <array>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <string>

namespace mfsdp::fasttext {

/// Bytes llvm::printEscapedString writes as they are: printable ASCII but
/// for the quote and the backslash.
inline bool plainStringByte(unsigned char c) {
  return c >= 0x20 && c <= 0x7E && c != '"' && c != '\\';
}

/// MLIR's bare identifier ([a-zA-Z_][a-zA-Z0-9_$.]*, in the C locale the
/// tools run in): a symbol printed without quotes.
inline bool bareIdentifier(llvm::StringRef s) {
  auto alpha = [](unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  };
  if (s.empty() || (!alpha(s[0]) && s[0] != '_'))
    return false;
  for (unsigned char c : s.drop_front())
    if (!alpha(c) && !(c >= '0' && c <= '9') && c != '_' && c != '$' && c != '.')
      return false;
  return true;
}

/// The text `make(value)` gives, made once per value's bits: a graph or a
/// step repeats a few numbers (hyperparameters, FLOP counts) on every op.
/// Kept per thread and per type of `make` (pass a lambda: each has its own
/// type, where every function pointer shares one) in a direct-mapped cache;
/// valid until that thread's next call with the same `make`.
template <typename Make> const std::string &textByBits(double value, Make make) {
  struct Entry {
    uint64_t bits = 0;
    bool used = false;
    std::string text;
  };
  thread_local std::array<Entry, 256> cache;
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  Entry &e = cache[((bits ^ (bits >> 32)) * 0x9E3779B97F4A7C15ull) >> 56];
  if (!e.used || e.bits != bits) {
    e.text = make(value);
    e.bits = bits;
    e.used = true;
  }
  return e.text;
}

/// `"text"`, escaped as MLIR escapes it.
inline void writeString(llvm::raw_ostream &os, llvm::StringRef s) {
  os << '"';
  bool plain = true;
  for (unsigned char c : s)
    if (!plainStringByte(c)) {
      plain = false;
      break;
    }
  if (plain)
    os << s;
  else
    llvm::printEscapedString(s, os);
  os << '"';
}

/// `value`'s decimal digits, as raw_ostream writes an int64_t (without its
/// formatting options: a step's memory plan prints millions).
inline void writeI64(llvm::raw_ostream &os, int64_t value) {
  char digits[24];
  const std::to_chars_result r = std::to_chars(digits, digits + sizeof(digits), value);
  os.write(digits, static_cast<size_t>(r.ptr - digits));
}

/// `@name`, or `@"name"` where it is no bare identifier (MLIR's form; an
/// empty name is refused by the verifiers and printed as MLIR does).
inline void writeSymbol(mlir::AsmPrinter &p, llvm::StringRef s) {
  if (!bareIdentifier(s)) {
    p.printSymbolName(s);
    return;
  }
  p.getStream() << '@' << s;
}

} // namespace mfsdp::fasttext

namespace mfsdp {

// custom<FastString>($prop): a StringProp, the op's own std::string (no
// attribute to unique: a name printed once per op).
inline mlir::ParseResult parseFastString(mlir::OpAsmParser &parser, std::string &value) {
  return parser.parseString(&value);
}
inline void printFastString(mlir::OpAsmPrinter &p, mlir::Operation *, llvm::StringRef value) {
  fasttext::writeString(p.getStream(), value);
}

// custom<FastSymbol>($attr): a FlatSymbolRefAttr.
inline mlir::ParseResult parseFastSymbol(mlir::OpAsmParser &parser,
                                         mlir::FlatSymbolRefAttr &attr) {
  return parser.parseCustomAttributeWithFallback(
      attr, parser.getBuilder().getType<mlir::NoneType>());
}
inline void printFastSymbol(mlir::OpAsmPrinter &p, mlir::Operation *,
                            mlir::FlatSymbolRefAttr attr) {
  fasttext::writeSymbol(p, attr.getValue());
}

// custom<FastSymbols>($attr): a FlatSymbolRefArrayAttr, `[@a, @b]`.
inline mlir::ParseResult parseFastSymbols(mlir::OpAsmParser &parser, mlir::ArrayAttr &attr) {
  return parser.parseCustomAttributeWithFallback(
      attr, parser.getBuilder().getType<mlir::NoneType>());
}
inline void printFastSymbols(mlir::OpAsmPrinter &p, mlir::Operation *, mlir::ArrayAttr attr) {
  llvm::raw_ostream &os = p.getStream();
  os << '[';
  bool first = true;
  for (mlir::Attribute a : attr) {
    if (!first)
      os << ", ";
    first = false;
    if (auto ref = llvm::dyn_cast<mlir::FlatSymbolRefAttr>(a))
      fasttext::writeSymbol(p, ref.getValue());
    else // (the verifier refuses it; printed as MLIR would)
      p.printAttributeWithoutType(a);
  }
  os << ']';
}

// custom<FastI64>($attr): an I64Attr, its decimal digits written directly
// (MLIR's path for an attribute goes through its alias lookup and dispatch
// for each of the several integers on every sched op).
inline mlir::ParseResult parseFastI64(mlir::OpAsmParser &parser, mlir::IntegerAttr &attr) {
  return parser.parseCustomAttributeWithFallback(attr, parser.getBuilder().getI64Type());
}
inline void printFastI64(mlir::OpAsmPrinter &p, mlir::Operation *, mlir::IntegerAttr attr) {
  if (!attr.getType().isSignlessInteger(64)) {
    p.printAttributeWithoutType(attr);
    return;
  }
  fasttext::writeI64(p.getStream(), attr.getInt());
}

// custom<FastI64Array>($attr): a DenseI64ArrayAttr, `[1, 2, 3]` as its own
// printer writes it (interleaved with ", "): a step's runtime memory plan
// holds seven offsets for every parameter.
inline mlir::ParseResult parseFastI64Array(mlir::OpAsmParser &parser,
                                           mlir::DenseI64ArrayAttr &attr) {
  return parser.parseCustomAttributeWithFallback(attr, mlir::Type{});
}
inline void printFastI64Array(mlir::OpAsmPrinter &p, mlir::Operation *,
                              mlir::DenseI64ArrayAttr attr) {
  if (!attr) { // (the verifier refuses it; printed as MLIR would)
    p.printAttribute(attr);
    return;
  }
  llvm::raw_ostream &os = p.getStream();
  os << '[';
  bool first = true;
  for (int64_t v : attr.asArrayRef()) {
    if (!first)
      os << ", ";
    first = false;
    fasttext::writeI64(os, v);
  }
  os << ']';
}

// custom<FastF64>($attr): an F64Attr, its text as MLIR prints the value
// (the decimal form that reads back exactly, else hexadecimal), made once
// per value: a step repeats a few FLOP counts on every op.
inline mlir::ParseResult parseFastF64(mlir::OpAsmParser &parser, mlir::FloatAttr &attr) {
  return parser.parseCustomAttributeWithFallback(attr, parser.getBuilder().getF64Type());
}
inline void printFastF64(mlir::OpAsmPrinter &p, mlir::Operation *, mlir::FloatAttr attr) {
  if (!attr.getType().isF64()) {
    p.printAttributeWithoutType(attr);
    return;
  }
  p.getStream() << fasttext::textByBits(attr.getValueAsDouble(), [&](double) {
    std::string text;
    llvm::raw_string_ostream os(text);
    attr.print(os, /*elideType=*/true);
    return text;
  });
}

} // namespace mfsdp

#endif // MFSDP_DIALECTS_FASTTEXT_H
