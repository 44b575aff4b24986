# Writes OUT, the definitions of harness/build_commit.hpp: the git commit of SOURCE_DIR and whether
# its tracked files differ from it. Run at every build (harness/CMakeLists.txt); OUT is rewritten
# only when its text changes, so an unchanged tree recompiles nothing.
# cmake -DSOURCE_DIR=... -DOUT=... -P build_commit.cmake
set(commit "")
set(modified "false")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} rev-parse --verify HEAD
    OUTPUT_VARIABLE head RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0 AND head MATCHES "^[0-9a-f]+$")
    set(commit "${head}")
    execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} status --porcelain
      --untracked-files=no OUTPUT_VARIABLE changes RESULT_VARIABLE rc ERROR_QUIET)
    if(rc EQUAL 0 AND NOT changes STREQUAL "")
      set(modified "true")
    endif()
  endif()
endif()
set(text "// Generated at build time by harness/build_commit.cmake.
#include \"harness/build_commit.hpp\"
namespace xentlab {
const char* const kBuildCommit = \"${commit}\";
const bool kBuildModified = ${modified};
}  // namespace xentlab
")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
