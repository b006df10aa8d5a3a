// Writing the files users and dlperf read back (run records, reports, traces, the machine profile).
#pragma once

#include <string>
#include <system_error>
#include <vector>

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

/// The local time as dlperf's default file names start with it: "20261123-090529".
std::string file_timestamp();

/// `dir/stem` + each of `extensions` where none of those files exists yet, else `dir/stem-2`,
/// `dir/stem-3`, ... (returned without an extension): so runs that finish within the same second
/// (the lab's short runs, 'bench copy' then 'bench launch') each keep their own files, and files
/// written together (a profile's table and trace) keep one name.
std::string unused_stem(const std::string& dir, const std::string& stem, const std::vector<std::string>& extensions);

}  // namespace dlperf
