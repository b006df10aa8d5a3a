// Writing the files users and dlperf read back (run records, reports, traces, the machine profile).
#pragma once

#include <string>
#include <system_error>

namespace dlperf {

/// Writes `body` to `path` through a temporary file beside it that is then renamed over it, so
/// a reader (plan --against, lab --resume, the user's own scripts) never sees half a file, and a
/// full disk is an Error (with `hint`) rather than a silently truncated file: the stream is
/// closed, which flushes it, before it is checked. Creates `path`'s directory.
void write_file_atomically(const std::string& path, const std::string& body, const std::string& hint);

/// Whether `path` names a directory: one that exists, or a name ending in '/'.
bool names_a_directory(const std::string& path);

/// Makes `dir` (with its parents) where it is missing and checks this process may write in it;
/// returns what went wrong, if anything, for the caller to say in its own words.
std::error_code make_writable_dir(const std::string& dir);

/// Checks, before any work, that `path` (given with `flag`) can later be written as a file: it is
/// not a directory, and its directory exists (or can be made) and is writable. So a long
/// benchmark is not run only to find its output path unusable.
void check_file_path(const std::string& path, const std::string& flag);

}  // namespace dlperf
