#include "core/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace dlperf {

std::string format_decimals(double x, int decimals) {
  int d = std::max(decimals, 0);
  // Only values under 1 lose their digits to rounding; 1 worker stays "1", not "1.0".
  if (x != 0 && std::fabs(x) < 1 && std::isfinite(x)) d = std::max(d, 1 - int(std::floor(std::log10(std::fabs(x)))));
  return fmt::format("{:.{}f}", x, d);
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t comma; (comma = s.find(',', start)) != std::string::npos; start = comma + 1) out.push_back(s.substr(start, comma - start));
  out.push_back(s.substr(start));
  return out;
}

std::string listed(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) out += (i == 0 ? "" : i + 1 == words.size() ? " and " : ", ") + words[i];
  return out;
}

std::string printable(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    // The length of the UTF-8 sequence a lead byte starts (0: not a lead byte); overlong forms
    // and surrogates are rare enough in a damaged file not to need their own rule.
    const size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size() && (len > 1 || (c >= 0x20 && c != 0x7F) || c == '\n' || c == '\t');
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
      ++i;
    }
  }
  return out;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  // Levenshtein with adjacent swaps as one edit (the optimal-string-alignment distance): "fp23"
  // is one typo of "fp32", as "trian" is of "train". Three rows: a swap looks two back.
  std::vector<size_t> before(b.size() + 1), last(b.size() + 1), row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) last[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      row[j] = std::min({last[j] + 1, row[j - 1] + 1, last[j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) row[j] = std::min(row[j], before[j - 2] + 1);
    }
    std::swap(before, last);
    std::swap(last, row);
  }
  return last[b.size()];
}

std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = 3;  // more than two edits away is no suggestion
  for (const auto& c : candidates)
    // Nor is a word that changes by half its letters: "fp8" is two edits from "fp32".
    if (const size_t d = edit_distance(word, c); d < best_d && 2 * d < word.size()) best = c, best_d = d;
  return best;
}

}  // namespace dlperf
