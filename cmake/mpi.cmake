# libnostall_mpi: the partitioned cache over MPI (include/nostall_mpi.h,
# src/mpi/), its tests (tests/mpi/) and the CLI's MPI hooks (tools/mpi/).
# Everything here is built only where an MPI C compiler wrapper/library is
# found; otherwise one test is registered that reports the skip.
#
# A configure that found no MPI must not stick: `make demo` configures build/
# before `make test` installs libopenmpi-dev, and FindMPI caches what it did
# not find, so the rerun configure kept MPI off (the CLI lost
# --partitioned-cache and the MPI tests skipped). While MPI is missing, every
# configure forgets FindMPI's cache and searches again.
if(NOSTALL_MPI_MISSING)
  get_cmake_property(_nst_cache_vars CACHE_VARIABLES)
  foreach(_nst_var IN LISTS _nst_cache_vars)
    if(_nst_var MATCHES "^MPI(_|EXEC)")
      unset(${_nst_var} CACHE)
    endif()
  endforeach()
endif()
find_package(MPI QUIET COMPONENTS C)
if(MPI_C_FOUND)
  set(NOSTALL_MPI_MISSING OFF CACHE INTERNAL "")
else()
  set(NOSTALL_MPI_MISSING ON CACHE INTERNAL "")
endif()

if(NOT MPI_C_FOUND)
  message(STATUS "nostall: MPI not found; libnostall_mpi and its tests are not built")
  add_test(NAME mpi_partitioned_cache
           COMMAND sh -c "echo 'SKIP: MPI (libopenmpi-dev, openmpi-bin) was not found when configuring; libnostall_mpi not built'; exit 77")
  set_tests_properties(mpi_partitioned_cache PROPERTIES SKIP_RETURN_CODE 77)
  return()
endif()

set(NOSTALL_MPI_SOURCES ${CMAKE_SOURCE_DIR}/src/mpi/partitioned.c ${CMAKE_SOURCE_DIR}/src/mpi/arena.c)

add_library(nostall_mpi_objs OBJECT ${NOSTALL_MPI_SOURCES})
# Hidden by default: only what nostall_mpi.h marks NOSTALL_MPI_API leaves
# the library (and the version script says the same).
set_target_properties(nostall_mpi_objs PROPERTIES POSITION_INDEPENDENT_CODE ON
                      C_VISIBILITY_PRESET hidden)
target_compile_definitions(nostall_mpi_objs PRIVATE _GNU_SOURCE NOSTALL_BUILDING_MPI)
if(NOSTALL_TEST_HOOKS)
  target_compile_definitions(nostall_mpi_objs PRIVATE NOSTALL_TEST_HOOKS=1)
endif()
target_include_directories(nostall_mpi_objs PRIVATE ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(nostall_mpi_objs PRIVATE MPI::MPI_C Threads::Threads)

# Shared: on top of libnostall.so. Static: on top of libnostall.a (the CLI and
# the tests use it, so that the loader and the hooks share one copy of
# nostall_error_set / nostall_fetch_buf_reserve).
add_library(nostall_mpi SHARED $<TARGET_OBJECTS:nostall_mpi_objs>)
target_link_libraries(nostall_mpi PUBLIC nostall MPI::MPI_C PRIVATE Threads::Threads)
target_include_directories(nostall_mpi PUBLIC $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>)
set_target_properties(nostall_mpi PROPERTIES VERSION ${PROJECT_VERSION}
                      SOVERSION ${PROJECT_VERSION_MAJOR}
                      LINK_FLAGS "-Wl,--version-script=${CMAKE_SOURCE_DIR}/src/mpi/nostall_mpi.map")

add_library(nostall_mpi_static STATIC $<TARGET_OBJECTS:nostall_mpi_objs>)
set_target_properties(nostall_mpi_static PROPERTIES OUTPUT_NAME nostall_mpi)
target_link_libraries(nostall_mpi_static PUBLIC nostall_static MPI::MPI_C Threads::Threads)
target_include_directories(nostall_mpi_static PUBLIC ${CMAKE_SOURCE_DIR}/include)

install(TARGETS nostall_mpi nostall_mpi_static LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/nostall_mpi.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# The CLI: `nostall bench --partitioned-cache` (tools/bench.c calls
# tools/mpi/tool_mpi.h under #ifdef NOSTALL_HAVE_MPI).
target_sources(nostall_cli PRIVATE ${CMAKE_SOURCE_DIR}/tools/mpi/tool_mpi.c)
target_compile_definitions(nostall_cli PRIVATE NOSTALL_HAVE_MPI)
target_include_directories(nostall_cli PRIVATE ${CMAKE_SOURCE_DIR}/tools)
target_link_libraries(nostall_cli PRIVATE nostall_mpi_static MPI::MPI_C)

# Tests: a driver (MPI + loader, JSON per epoch) and the scenarios around it.
add_executable(mpi_loader_check ${CMAKE_SOURCE_DIR}/tests/mpi/mpi_loader_check.c)
target_compile_definitions(mpi_loader_check PRIVATE _GNU_SOURCE)
target_link_libraries(mpi_loader_check PRIVATE nostall_mpi_static MPI::MPI_C)

add_executable(mpi_api_check ${CMAKE_SOURCE_DIR}/tests/mpi/mpi_api_check.c)
target_compile_definitions(mpi_api_check PRIVATE _GNU_SOURCE)
target_link_libraries(mpi_api_check PRIVATE nostall_mpi_static MPI::MPI_C)

find_program(NOSTALL_MPIEXEC NAMES mpirun mpiexec HINTS ${MPIEXEC_EXECUTABLE})
# (the 3x speed-up at 50 MB/s is a benchmark: bench/partitioned_cache.sh)
foreach(t mpi_api mpi_partitioned_cache mpi_peer_killed mpi_faults)
  add_test(NAME ${t} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/run.sh ${t})
  set_tests_properties(${t} PROPERTIES TIMEOUT ${NOSTALL_TEST_TIMEOUT} SKIP_RETURN_CODE 77
    ENVIRONMENT "NOSTALL_CLI=$<TARGET_FILE:nostall_cli>;NOSTALL_MPI_CHECK=$<TARGET_FILE:mpi_loader_check>;NOSTALL_MPIEXEC=${NOSTALL_MPIEXEC};NOSTALL_TEST_TMP=${CMAKE_BINARY_DIR}/test-tmp")
endforeach()
