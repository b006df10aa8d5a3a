// Small helpers for the sentences dlperf prints.
#pragma once

#include <string>
#include <vector>

namespace dlperf {

/// "1 thread", "2 threads": a count with its noun, singular for one.
inline std::string counted(long long n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

/// "a,b,,c" -> {"a", "b", "", "c"}: every piece between commas, empty ones kept.
std::vector<std::string> split_commas(const std::string& s);

/// Words as a sentence lists them: "a", "a and b", "a, b and c".
std::string listed(const std::vector<std::string>& words);

/// x with at least `decimals` decimals, and more where a value under 1 would otherwise lose its
/// two leading significant digits: a 5.4 us layer is "0.0054" ms, not "0.005" read as half
/// of it or "0.000" read as free. Exact zero keeps `decimals` ("0.000").
std::string format_decimals(double x, int decimals);

/// `s` fit for a terminal: bytes that are not printable text (control characters, bytes outside
/// well-formed UTF-8) as \xNN. For text quoted from a damaged file, as a JSON parser's "last read".
std::string printable(const std::string& s);

/// The edits (insert, delete, change, or swap two neighbours) that turn `a` into `b`, for "did
/// you mean" (as ninja does).
size_t edit_distance(const std::string& a, const std::string& b);

/// The candidate closest to `word` within two edits and fewer than half its letters, or "": one
/// suggestion, not a list.
std::string closest(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace dlperf
