// Writing the files users and dlperf read back (run records, reports, traces, the machine profile).
#pragma once

#include <string>

namespace dlperf {

/// Writes `body` to `path` through a temporary file beside it that is then renamed over it, so
/// a reader (plan --against, lab --resume, the user's own scripts) never sees half a file, and a
/// full disk is an Error (with `hint`) rather than a silently truncated file: the stream is
/// closed, which flushes it, before it is checked. Creates `path`'s directory.
void write_file_atomically(const std::string& path, const std::string& body, const std::string& hint);

/// Checks, before any work, that `path` (given with `flag`) can later be written as a file: it is
/// not a directory, and its directory exists (or can be made) and is writable. So a long
/// benchmark is not run only to find its output path unusable.
void check_file_path(const std::string& path, const std::string& flag);

}  // namespace dlperf
