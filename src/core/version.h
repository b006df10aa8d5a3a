// Which dlperf made a measurement: the release and the git commit of the source it was built
// from, so run records and reports name the code behind their numbers.
#pragma once

namespace dlperf {

/// The release, for example "0.1.0".
const char* dlperf_version();
/// `git describe --always --dirty` of the source tree at build time (a commit, "-dirty" when the
/// tree had uncommitted changes), or "unknown" when it was built outside a git checkout.
const char* dlperf_commit();

}  // namespace dlperf
