#include "core/version.h"

#include "commit.h"  // generated at every build by cmake/commit.cmake

namespace dlperf {

const char* dlperf_version() { return DLPERF_VERSION; }
const char* dlperf_commit() { return DLPERF_COMMIT; }

}  // namespace dlperf
