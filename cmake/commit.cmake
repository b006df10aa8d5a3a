# Writes the source tree's git commit into a header (cmake -DSRC=... -DOUT=... -P commit.cmake).
# Run at every build; the header is replaced only when the commit changes, so one small file
# recompiles after a commit and nothing otherwise. Without git or a .git folder: "unknown".
execute_process(COMMAND git -C "${SRC}" describe --always --dirty --abbrev=12
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
endif()
file(WRITE "${OUT}.tmp" "#define DLPERF_COMMIT \"${commit}\"\n")
execute_process(COMMAND "${CMAKE_COMMAND}" -E copy_if_different "${OUT}.tmp" "${OUT}")
file(REMOVE "${OUT}.tmp")
