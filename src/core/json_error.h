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

}  // namespace dlperf
