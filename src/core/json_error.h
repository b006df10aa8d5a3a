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
/// j.value(key, fallback) for an optional field: the fallback where `j` has no `key`, and a value
/// of another type said with its key, as read_field says it. (A `j` that is no object throws as
/// j.value does: "cannot use value() with number".)
template <class T>
T value_field(const nlohmann::json& j, const char* key, const T& fallback) {
  if (!j.is_object() || !j.contains(key)) return j.value(key, fallback);
  return field<T>(j, key);
}
/// `v`, which must be an object: another type is said with `what` ("planned: type must be object,
/// but is number"; without it, as within() places it); object_at(j, key) is as_object(j.at(key), key).
inline const nlohmann::json& as_object(const nlohmann::json& v, const std::string& what = "") {
  if (!v.is_object())
    throw nlohmann::json::type_error::create(302, (what.empty() ? "" : what + ": ") + "type must be object, but is " + v.type_name(),
                                             nullptr);
  return v;
}
inline const nlohmann::json& object_at(const nlohmann::json& j, const char* key) { return as_object(j.at(key), key); }
/// An optional object field: object_at(j, key), or an empty object where `j` has no `key`.
inline nlohmann::json object_field(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return j.value(key, nlohmann::json::object());
  return object_at(j, key);
}

/// Runs `read` on a part of a file, its type errors and missing keys said with where the part is:
/// within("planned", ...) turns "seconds: type must be number, but is string" into
/// "planned.seconds: type must be number, but is string" (a key found at several depths told
/// apart), and "key 'name' not found" into "experiments[2]: key 'name' not found".
template <class F>
auto within(const std::string& where, F&& read) -> decltype(read()) {
  auto placed = [&](const nlohmann::json::exception& e) {
    const std::string text = json_error_text(e);
    const bool keyed = text.find(": ") < text.find(' ');  // "seconds: type must ...", "columns[0]: ..."
    return where + (keyed ? "." : ": ") + text;
  };
  try {
    return read();
  } catch (const nlohmann::json::type_error& e) {
    throw nlohmann::json::type_error::create(e.id, placed(e), nullptr);
  } catch (const nlohmann::json::out_of_range& e) {
    throw nlohmann::json::out_of_range::create(e.id, placed(e), nullptr);
  }
}

}  // namespace dlperf
