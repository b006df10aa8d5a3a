#include "core/json_error.h"

#include "core/text.h"

namespace dlperf {

std::string json_error_text(const nlohmann::json::exception& e) {
  std::string s = e.what();
  if (s.rfind("[json.exception.", 0) == 0)
    if (const auto close = s.find("] "); close != std::string::npos) s.erase(0, close + 2);
  if (s.rfind("parse error at ", 0) == 0) s.erase(0, 15);
  if (s.rfind("parse error: ", 0) == 0) s.erase(0, 13);
  return printable(s);  // a parse error quotes the bytes it read, and a damaged file's are any bytes
}

}  // namespace dlperf
