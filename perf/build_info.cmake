# Writes OUTPUT, a JSON description of a build: the commit of SOURCE_DIR
# (with -dirty when tracked files differ from it), the Kokkos configuration
# (KOKKOS_VERSION, KOKKOS_DEVICES, KOKKOS_ARCH), COMPILER, BUILD_TYPE and the
# extra nvcc flags of the build environment (Hopper code for Kokkos 3.4).
# Run with cmake -P at every build; the file changes only when its content does.
find_package(Git QUIET)
set(commit "unknown")
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} describe --always --dirty --abbrev=12
                          --exclude=*
                  OUTPUT_VARIABLE described OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE git_status ERROR_QUIET)
  if(git_status EQUAL 0)
    set(commit "${described}")
  endif()
endif()

set(kokkos "Kokkos ${KOKKOS_VERSION}, devices ${KOKKOS_DEVICES}")
if(KOKKOS_ARCH)
  string(APPEND kokkos ", arch ${KOKKOS_ARCH}")
endif()

string(JSON json SET "{}" commit "\"${commit}\"")
string(JSON json SET "${json}" kokkos "\"${kokkos}\"")
string(JSON json SET "${json}" compiler "\"${COMPILER}\"")
string(JSON json SET "${json}" build_type "\"${BUILD_TYPE}\"")
if(DEFINED ENV{NVCC_APPEND_FLAGS})
  string(JSON json SET "${json}" nvcc_append_flags "\"$ENV{NVCC_APPEND_FLAGS}\"")
endif()

set(old "")
if(EXISTS ${OUTPUT})
  file(READ ${OUTPUT} old)
endif()
if(NOT old STREQUAL "${json}\n")
  file(WRITE ${OUTPUT} "${json}\n")
endif()
