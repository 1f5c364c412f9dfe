//===- JsonText.h - Words for JSON values in the readers' messages -*- C++ -*-===//
//
// Shared by the graph format's reader (GraphJson.cpp) and the HF config
// importer (HFConfig.cpp), which name what they found where they expected
// something else ("expected an integer, got a string"), and where (a JSON
// pointer).
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_LIB_GRAPH_JSONTEXT_H
#define MFSDP_LIB_GRAPH_JSONTEXT_H

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace mfsdp::graph {

/// "a string", "an integer", ...: the kind of a JSON value, with its article
/// (json and ordered_json share the value_t).
inline const char *jsonTypeName(nlohmann::json::value_t t) {
  using V = nlohmann::json::value_t;
  switch (t) {
  case V::null:
    return "null";
  case V::boolean:
    return "a boolean";
  case V::number_integer:
  case V::number_unsigned:
    return "an integer";
  case V::number_float:
    return "a number";
  case V::string:
    return "a string";
  case V::array:
    return "an array";
  case V::object:
    return "an object";
  default:
    return "a value";
  }
}

/// `key` as one token of a JSON pointer (RFC 6901: '~' as "~0", '/' as
/// "~1"), for the pointer a diagnostic names.
inline std::string jsonPointerToken(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

} // namespace mfsdp::graph

#endif // MFSDP_LIB_GRAPH_JSONTEXT_H
