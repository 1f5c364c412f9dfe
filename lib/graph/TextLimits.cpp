//===- TextLimits.cpp - What an input text may hold before it is parsed ---===//
#include "mfsdp/graph/TextLimits.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <unordered_set>
#include <vector>

namespace mfsdp::graph {

namespace {

/// A position in the text that knows its line and column.
struct Cursor {
  explicit Cursor(std::string_view t) : t(t) {}
  bool done() const { return pos >= t.size(); }
  char peek(size_t ahead = 0) const {
    return pos + ahead < t.size() ? t[pos + ahead] : '\0';
  }
  void advance() {
    if (t[pos] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
    ++pos;
  }
  TextProblem problem(int l, int c, std::string message) const {
    return TextProblem{l, c, std::move(message)};
  }

  std::string_view t;
  size_t pos = 0;
  int line = 1, column = 1;
};

void appendUtf8(std::string &out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::optional<uint32_t> hex4(std::string_view s, size_t at) {
  if (at + 4 > s.size())
    return std::nullopt;
  uint32_t v = 0;
  for (size_t i = at; i < at + 4; ++i) {
    char c = s[i];
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= static_cast<uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f')
      v |= static_cast<uint32_t>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      v |= static_cast<uint32_t>(c - 'A' + 10);
    else
      return std::nullopt;
  }
  return v;
}

/// A JSON string's content (between the quotes) unescaped as a JSON reader
/// unescapes it, so that "a" and "\u0061" are the same key; a malformed
/// escape is kept as written (the parser reports it).
std::string unescape(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\\' || i + 1 >= raw.size()) {
      out += raw[i];
      continue;
    }
    char e = raw[++i];
    switch (e) {
    case 'b':
      out += '\b';
      break;
    case 'f':
      out += '\f';
      break;
    case 'n':
      out += '\n';
      break;
    case 'r':
      out += '\r';
      break;
    case 't':
      out += '\t';
      break;
    case 'u': {
      std::optional<uint32_t> cp = hex4(raw, i + 1);
      if (!cp) {
        out += "\\u";
        break;
      }
      i += 4;
      if (*cp >= 0xD800 && *cp < 0xDC00 && i + 2 < raw.size() &&
          raw[i + 1] == '\\' && raw[i + 2] == 'u') {
        if (std::optional<uint32_t> lo = hex4(raw, i + 3);
            lo && *lo >= 0xDC00 && *lo < 0xE000) {
          *cp = 0x10000 + ((*cp - 0xD800) << 10) + (*lo - 0xDC00);
          i += 6;
        }
      }
      appendUtf8(out, *cp);
      break;
    }
    default: // \" \\ \/ and anything the parser will refuse
      out += e;
    }
  }
  return out;
}

bool numberChar(char c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' ||
         c == 'e' || c == 'E';
}

} // namespace

std::string brief(std::string_view s, size_t maxBytes) {
  std::string out;
  const size_t keep = s.size() > maxBytes ? maxBytes : s.size();
  for (size_t i = 0; i < keep; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F)
      out += fmt::format("\\x{:02X}", c);
    else
      out += static_cast<char>(c);
  }
  if (keep < s.size())
    out += fmt::format("... ({} bytes in all)", s.size());
  return out;
}

std::optional<TextProblem> checkJsonText(std::string_view text, int maxDepth) {
  struct Frame {
    bool object = false;
    bool expectKey = false;
    std::unordered_set<std::string> keys;
  };
  std::vector<Frame> stack;
  Cursor c(text);
  while (!c.done()) {
    const char ch = c.peek();
    if (ch == '{' || ch == '[') {
      if (static_cast<int>(stack.size()) >= maxDepth)
        return c.problem(c.line, c.column,
                         fmt::format("JSON nested deeper than {} levels; the "
                                     "readers accept at most {}",
                                     maxDepth, maxDepth));
      Frame f;
      f.object = f.expectKey = ch == '{';
      stack.push_back(std::move(f));
      c.advance();
    } else if (ch == '}' || ch == ']') {
      if (!stack.empty())
        stack.pop_back();
      c.advance();
    } else if (ch == ',' || ch == ':') {
      if (!stack.empty() && stack.back().object)
        stack.back().expectKey = ch == ',';
      c.advance();
    } else if (ch == '"') {
      const int line = c.line, column = c.column;
      c.advance();
      const size_t start = c.pos;
      bool escaped = false;
      while (!c.done() && c.peek() != '"') {
        if (c.peek() == '\\' && c.pos + 1 < text.size()) {
          escaped = true;
          c.advance();
        }
        c.advance();
      }
      std::string_view raw = text.substr(start, c.pos - start);
      if (!c.done())
        c.advance();
      if (!stack.empty() && stack.back().object && stack.back().expectKey) {
        std::string key = escaped ? unescape(raw) : std::string(raw);
        stack.back().expectKey = false;
        if (!stack.back().keys.insert(key).second)
          return c.problem(line, column,
                           fmt::format("duplicate key '{}': a key may appear "
                                       "once in an object",
                                       brief(key)));
      }
    } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
      const int line = c.line, column = c.column;
      const size_t start = c.pos;
      while (!c.done() && numberChar(c.peek()))
        c.advance();
      std::string number(text.substr(start, c.pos - start));
      if (std::isinf(std::strtod(number.c_str(), nullptr)))
        return c.problem(line, column,
                         fmt::format("number {} is out of range of a 64-bit "
                                     "float",
                                     brief(number, 40)));
    } else {
      c.advance();
    }
  }
  return std::nullopt;
}

std::optional<TextProblem> checkMlirNesting(std::string_view text, int maxDepth) {
  if (text.substr(0, 4) == std::string_view("ML\xEFR", 4))
    return std::nullopt; // bytecode
  // One pass over the bytes that matter (a model's text runs to hundreds of
  // megabytes), the others skipped by table: the line and column are
  // counted only for a problem.
  enum : uint8_t { Plain, Open, Close, Quote, Slash };
  static const std::array<uint8_t, 256> kind = [] {
    std::array<uint8_t, 256> k{};
    for (unsigned char c : std::string_view("{[(<"))
      k[c] = Open;
    for (unsigned char c : std::string_view("}])>"))
      k[c] = Close;
    k[static_cast<unsigned char>('"')] = Quote;
    k[static_cast<unsigned char>('/')] = Slash;
    return k;
  }();
  // Inside a string: its end (the closing quote, or the end of the line,
  // the parser's rule) and escapes.
  static const std::array<uint8_t, 256> inString = [] {
    std::array<uint8_t, 256> k{};
    k[static_cast<unsigned char>('"')] = k[static_cast<unsigned char>('\n')] =
        k[static_cast<unsigned char>('\\')] = 1;
    return k;
  }();
  const auto *const begin = reinterpret_cast<const unsigned char *>(text.data());
  const auto *const end = begin + text.size();
  int depth = 0;
  for (const unsigned char *p = begin; p < end; ++p) {
    while (p < end && kind[*p] == Plain)
      ++p;
    if (p == end)
      break;
    switch (kind[*p]) {
    case Open:
      if (++depth > maxDepth) {
        const size_t pos = static_cast<size_t>(p - begin);
        const size_t lineStart = pos == 0 ? std::string_view::npos : text.rfind('\n', pos - 1);
        const int line =
            1 + static_cast<int>(std::count(text.begin(), text.begin() + pos, '\n'));
        const int column = static_cast<int>(
            lineStart == std::string_view::npos ? pos + 1 : pos - lineStart);
        return TextProblem{line, column,
                           fmt::format("nesting deeper than {} levels (regions, "
                                       "attributes and types together); the "
                                       "tools read at most {}",
                                       maxDepth, maxDepth)};
      }
      break;
    case Close:
      // The arrow of a function type ('->') closes nothing.
      if (*p != '>' || p == begin || p[-1] != '-')
        depth = depth > 0 ? depth - 1 : 0;
      break;
    case Quote:
      // An escaped byte is skipped, whatever it is; the closing quote or
      // newline goes with the string.
      for (++p; p < end; ++p) {
        while (p < end && !inString[*p])
          ++p;
        if (p == end || *p != '\\')
          break;
        if (p + 1 < end)
          ++p;
      }
      if (p >= end)
        return std::nullopt; // the text ends inside the string
      break;
    case Slash:
      if (p + 1 < end && p[1] == '/') {
        const void *eol = std::memchr(p, '\n', static_cast<size_t>(end - p));
        p = (eol ? static_cast<const unsigned char *>(eol) : end) - 1; // the newline is next
      }
      break;
    }
  }
  return std::nullopt;
}

} // namespace mfsdp::graph
