// JSON files dlperf reads back (run records, checkpoints' headers, the machine profile, model
// specs) are the user's files too: edited by hand, cut short by a full disk, damaged. A field of
// the wrong type there must end in a message that names the file, not in nlohmann::json's own
// "[json.exception.type_error.302] type must be number, but is string".
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace dlperf {

/// nlohmann::json's message without the preamble that names its exception class:
///   "[json.exception.parse_error.101] parse error at line 3, column 32: syntax error ..." ->
///   "line 3, column 32: syntax error ...";
///   "[json.exception.type_error.302] type must be boolean, but is number" ->
///   "type must be boolean, but is number". Which field it was the library says only when built
///   with JSON_DIAGNOSTICS, which GCC 12 answers with -Warray-bounds false alarms in every file
///   that builds JSON, and which costs every value a parent pointer; so readers check the fields
///   they take (naming them) and keep this for what their checks miss.
std::string json_error_text(const nlohmann::json::exception& e);

/// Reads `j[key]` into `out`; a value of another type is said with its key ("train_s: type must
/// be number, but is boolean"), which nlohmann's own message leaves out (above). A missing key
/// throws as j.at(key) does: "key 'train_s' not found".
template <class T>
void read_field(const nlohmann::json& j, const char* key, T& out) {
  const nlohmann::json& v = j.at(key);
  try {
    out = v.get<T>();
  } catch (const nlohmann::json::type_error& e) {
    throw nlohmann::json::type_error::create(e.id, std::string(key) + ": " + json_error_text(e), nullptr);
  }
}
/// The same, returned: `const auto lr = field<double>(j, "lr")`.
template <class T>
T field(const nlohmann::json& j, const char* key) {
  T out{};
  read_field(j, key, out);
  return out;
}

}  // namespace dlperf
