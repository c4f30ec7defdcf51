# Compiles through ccache when it is installed (scripts/deps.sh installs it), unless a launcher is
# set already: a rebuild of an unchanged file is a cache hit, in this tree or in another clone on
# the same machine. ccache keeps its cache in ~/.cache/ccache unless CCACHE_DIR or its own
# configuration says otherwise.
#
# base_dir is the source tree, so the paths ccache hashes are relative to it and a clone in another
# folder finds the same entries (the compiler then prints relative paths too). Objects with debug
# information also hash the build folder unless hash_dir is false; scripts/test.sh sets that for its
# throw-away builds.
option(TARMAC_CCACHE "Compile through ccache when it is installed" ON)
if(TARMAC_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER AND NOT CMAKE_C_COMPILER_LAUNCHER)
  find_program(TARMAC_CCACHE_PROGRAM ccache)
  if(TARMAC_CCACHE_PROGRAM)
    set(_tarmac_ccache env "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}" ${TARMAC_CCACHE_PROGRAM})
    set(CMAKE_C_COMPILER_LAUNCHER ${_tarmac_ccache})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${_tarmac_ccache})
    message(STATUS "Compiling through ccache: ${TARMAC_CCACHE_PROGRAM}")
  endif()
endif()
