# cmake/fuzz.cmake — the fuzz targets, included from CMakeLists.txt.
#
# Every tests/fuzz/fuzz_<name>.c (found by glob) defines
# LLVMFuzzerTestOneInput (and optionally LLVMFuzzerInitialize) for one
# parser of untrusted input. For each:
#
#   fuzz_replay_<name>  in every build (gcc or clang, any sanitizer): the
#                       target linked with tests/fuzz/replay.c, a main() that
#                       feeds it files. Registered with ctest under the same
#                       name over tests/fuzz/corpus/<name> and
#                       tests/fuzz/crashes/<name> (and, for a name with a
#                       prefix, e.g. jpeg_diff, the corpus of the prefix,
#                       corpus/jpeg, if there is one): `make test` replays
#                       every seed and every past crash under ASan+UBSan.
#   fuzz_<name>         with -DNOSTALL_FUZZ=ON and clang only: the libFuzzer
#                       binary (-fsanitize=fuzzer,address,undefined; the
#                       library objects with -fsanitize=fuzzer-no-link,
#                       address,undefined). `make fuzz` runs them
#                       (tests/fuzz/run.sh). Target fuzz_all builds them all.
#
# Also fuzz_corpus_gen (tests/fuzz/corpus_gen.c), which writes the hand-made
# seeds (tests/fuzz/make_corpus.sh); built everywhere so that it keeps
# compiling.
option(NOSTALL_FUZZ "build the libFuzzer binaries (needs clang, libclang-rt-14-dev)" OFF)
set(NOSTALL_FUZZ_DIR ${CMAKE_SOURCE_DIR}/tests/fuzz)
file(GLOB NOSTALL_FUZZ_SOURCES CONFIGURE_DEPENDS ${NOSTALL_FUZZ_DIR}/fuzz_*.c)

if(NOSTALL_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "NOSTALL_FUZZ=ON needs clang: -DCMAKE_C_COMPILER=clang-14")
  endif()
  set(NOSTALL_FUZZ_SAN -fsanitize=address,undefined -fno-sanitize-recover=undefined
      -fno-omit-frame-pointer)
  # Coverage for libFuzzer in the library; whatever links it gets the
  # sanitizer runtimes (which also define the coverage callbacks).
  target_compile_options(nostall_objs PRIVATE -fsanitize=fuzzer-no-link ${NOSTALL_FUZZ_SAN})
  target_link_options(nostall PRIVATE -fsanitize=address,undefined)
  target_link_options(nostall_static INTERFACE -fsanitize=address,undefined)
  add_custom_target(fuzz_all)
endif()

function(nostall_fuzz_common target)
  target_compile_definitions(${target} PRIVATE _GNU_SOURCE)
  target_include_directories(${target} PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests
                             ${NOSTALL_FUZZ_DIR} ${JPEG_INCLUDE_DIRS})
  target_link_libraries(${target} PRIVATE nostall_static)
endfunction()

foreach(src ${NOSTALL_FUZZ_SOURCES})
  get_filename_component(target ${src} NAME_WE)
  string(REGEX REPLACE "^fuzz_" "" name ${target})
  add_executable(fuzz_replay_${name} ${src} ${NOSTALL_FUZZ_DIR}/replay.c)
  nostall_fuzz_common(fuzz_replay_${name})
  # (replay.c passes over a directory that does not exist, so one added
  # after cmake ran is replayed without running cmake again)
  set(dirs ${NOSTALL_FUZZ_DIR}/corpus/${name} ${NOSTALL_FUZZ_DIR}/crashes/${name})
  string(REGEX REPLACE "_.*" "" prefix ${name})
  if(NOT prefix STREQUAL name)
    list(APPEND dirs ${NOSTALL_FUZZ_DIR}/corpus/${prefix})
  endif()
  add_test(NAME fuzz_replay_${name} COMMAND fuzz_replay_${name} ${dirs})
  set_tests_properties(fuzz_replay_${name} PROPERTIES TIMEOUT ${NOSTALL_TEST_TIMEOUT} SKIP_RETURN_CODE 77
                       ENVIRONMENT "NOSTALL_TEST_TMP=${CMAKE_BINARY_DIR}/test-tmp")
  if(NOSTALL_FUZZ)
    add_executable(${target} ${src})
    nostall_fuzz_common(${target})
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer ${NOSTALL_FUZZ_SAN})
    target_link_options(${target} PRIVATE -fsanitize=fuzzer,address,undefined)
    add_dependencies(fuzz_all ${target})
  endif()
endforeach()

add_executable(fuzz_corpus_gen ${NOSTALL_FUZZ_DIR}/corpus_gen.c)
nostall_fuzz_common(fuzz_corpus_gen)
