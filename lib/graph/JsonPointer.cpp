//===- JsonPointer.cpp - Where a JSON pointer lies in the source text -----===//
//
// Diagnostics name the line and column of the value a JSON pointer
// designates: one pass over the text indexes where each shallow value
// starts.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/graph/Graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <unordered_map>

namespace mfsdp::graph {

namespace {
/// One pass over the text that records where each shallow value starts.
class Indexer {
public:
  Indexer(std::string_view t, int maxDepth) : t(t), maxDepth(maxDepth) {}

  bool run(std::unordered_map<std::string, std::pair<int, int>> &out) {
    this->out = &out;
    skipWs();
    return value("", 0);
  }

private:
  bool value(const std::string &ptr, int depth) {
    skipWs();
    if (pos >= t.size())
      return false;
    if (depth <= maxDepth)
      (*out)[ptr] = {line, col};
    char c = t[pos];
    if (c == '{') {
      advance();
      skipWs();
      if (pos < t.size() && t[pos] == '}') {
        advance();
        return true;
      }
      while (true) {
        skipWs();
        std::string key;
        if (!string(&key))
          return false;
        skipWs();
        if (pos >= t.size() || t[pos] != ':')
          return false;
        advance();
        std::string child;
        if (depth < maxDepth) {
          child = ptr + "/";
          for (char k : key)
            child += k == '~' ? std::string("~0")
                              : k == '/' ? std::string("~1") : std::string(1, k);
        }
        if (!value(child, depth + 1))
          return false;
        skipWs();
        if (pos < t.size() && t[pos] == ',') {
          advance();
          continue;
        }
        if (pos < t.size() && t[pos] == '}') {
          advance();
          return true;
        }
        return false;
      }
    }
    if (c == '[') {
      advance();
      skipWs();
      if (pos < t.size() && t[pos] == ']') {
        advance();
        return true;
      }
      for (size_t i = 0;; ++i) {
        std::string child =
            depth < maxDepth ? ptr + "/" + std::to_string(i) : std::string();
        if (!value(child, depth + 1))
          return false;
        skipWs();
        if (pos < t.size() && t[pos] == ',') {
          advance();
          continue;
        }
        if (pos < t.size() && t[pos] == ']') {
          advance();
          return true;
        }
        return false;
      }
    }
    if (c == '"')
      return string(nullptr);
    while (pos < t.size() && t[pos] != ',' && t[pos] != '}' && t[pos] != ']' &&
           !std::isspace((unsigned char)t[pos]))
      advance();
    return true;
  }
  bool string(std::string *out) {
    if (pos >= t.size() || t[pos] != '"')
      return false;
    advance();
    while (pos < t.size() && t[pos] != '"') {
      if (t[pos] == '\\' && pos + 1 < t.size()) {
        advance();
      }
      if (out)
        *out += t[pos];
      advance();
    }
    if (pos >= t.size())
      return false;
    advance();
    return true;
  }
  void advance() {
    if (t[pos] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
    ++pos;
  }
  void skipWs() {
    while (pos < t.size() && std::isspace((unsigned char)t[pos]))
      advance();
  }

  std::string_view t;
  int maxDepth;
  size_t pos = 0;
  int line = 1, col = 1;
  std::unordered_map<std::string, std::pair<int, int>> *out = nullptr;
};
} // namespace

std::unordered_map<std::string, std::pair<int, int>>
indexPointers(std::string_view text, int maxDepth) {
  std::unordered_map<std::string, std::pair<int, int>> out;
  if (!Indexer(text, maxDepth).run(out))
    out.clear();
  return out;
}

std::pair<int, int> locatePointer(std::string_view text,
                                  std::string_view pointer) {
  int depth = static_cast<int>(std::count(pointer.begin(), pointer.end(), '/'));
  auto index = indexPointers(text, depth);
  std::string prefix(pointer);
  while (true) {
    auto it = index.find(prefix);
    if (it != index.end())
      return it->second;
    if (prefix.empty())
      return {0, 0};
    prefix.erase(prefix.rfind('/'));
  }
}

std::pair<int, int> lineColumnOf(std::string_view text, size_t offset) {
  int line = 1, col = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

Diagnostic invalidJson(std::string_view text, std::string what, size_t byte) {
  // nlohmann tracks the line and column itself and puts them in the
  // message; fall back to its byte offset (the last byte it read).
  Diagnostic d;
  if (auto at = what.find("at line "); at != std::string::npos)
    std::sscanf(what.c_str() + at, "at line %d, column %d", &d.line, &d.column);
  if (d.line <= 0)
    std::tie(d.line, d.column) = lineColumnOf(text, byte > 0 ? byte - 1 : 0);
  // Drop nlohmann's "[json.exception.parse_error.101] " prefix.
  if (auto p = what.find("] "); p != std::string::npos)
    what = what.substr(p + 2);
  d.message = "invalid JSON: " + what;
  return d;
}

} // namespace mfsdp::graph
