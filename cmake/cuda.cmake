# decode_device=gpu (issue 37; docs/gpu.md "GPU decode"): CUDA and nvJPEG.
#
# NOSTALL_CUDA=AUTO (default) builds the GPU path when find_package(CUDAToolkit)
# and nvcc are found, ON requires them, OFF never builds it. Without it
# everything else builds as before and decode_device=gpu is a clear error.
# With it: NOSTALL_HAVE_CUDA is defined (for the library and the tests),
# src/gpu/cuda_*.c and src/gpu/*.cu join the library, the CUDA runtime is
# linked statically (CUDA::cudart_static: nothing to install beside
# libnostall; the driver's libcuda is opened by the runtime when first
# used), and the kernels are compiled for sm_80 (A100) and sm_90
# (H100/H200), each as SASS and PTX, so a newer GPU's driver JIT-compiles
# the PTX. nvJPEG: only its header is needed here (NOSTALL_NVJPEG_INCLUDE:
# the toolkit's include/, else PyPI's nvidia-nvjpeg wheel, e.g. in the peers'
# venv); libnvjpeg is opened at run time with dlopen (src/gpu/cuda_probe.c),
# so libnostall loads on machines without it. Found, it defines
# NOSTALL_HAVE_NVJPEG.
set(NOSTALL_CUDA AUTO CACHE STRING "build decode_device=gpu: AUTO (when CUDA is found), ON, OFF")
set_property(CACHE NOSTALL_CUDA PROPERTY STRINGS AUTO ON OFF)
set(NOSTALL_CUDA_LIBS "")
set(NOSTALL_HAVE_CUDA OFF)
set(NOSTALL_HAVE_NVJPEG OFF)
if(NOT NOSTALL_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND CUDAToolkit_NVCC_EXECUTABLE AND NOT CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE} CACHE FILEPATH "nvcc")
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CUDAToolkit_FOUND AND CMAKE_CUDA_COMPILER)
    set(NOSTALL_HAVE_CUDA ON)
  elseif(NOSTALL_CUDA STREQUAL "ON")
    message(FATAL_ERROR "NOSTALL_CUDA=ON but no CUDA toolkit with nvcc was found "
                        "(set CUDAToolkit_ROOT, e.g. /usr/local/cuda)")
  else()
    message(STATUS "CUDA toolkit not found: decode_device=gpu is not built")
  endif()
endif()

if(NOSTALL_HAVE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    # "80;90": for each, SASS and PTX (CMake's real + virtual).
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  file(GLOB _nst_venv_nvjpeg $ENV{HOME}/.cache/nostall/peers/venv/lib/python3*/site-packages/nvidia/nvjpeg/include)
  find_path(NOSTALL_NVJPEG_INCLUDE nvjpeg.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${_nst_venv_nvjpeg}
            DOC "folder holding nvjpeg.h (the CUDA toolkit's include/, or the nvidia-nvjpeg wheel's)")
  if(NOSTALL_NVJPEG_INCLUDE)
    set(NOSTALL_HAVE_NVJPEG ON)
    add_compile_definitions(NOSTALL_HAVE_NVJPEG=1)
  else()
    message(STATUS "nvjpeg.h not found: decode_device=gpu will say so (set NOSTALL_NVJPEG_INCLUDE)")
  endif()
  add_compile_definitions(NOSTALL_HAVE_CUDA=1)
  set(NOSTALL_CUDA_LIBS CUDA::cudart_static)
  message(STATUS "decode_device=gpu: CUDA ${CUDAToolkit_VERSION}, architectures "
                 "${CMAKE_CUDA_ARCHITECTURES}, nvjpeg.h: ${NOSTALL_NVJPEG_INCLUDE}")
else()
  list(FILTER NOSTALL_SOURCES EXCLUDE REGEX "/src/gpu/cuda_")
endif()

# The CUDA sources and flags of the library's object library `target`.
function(nostall_cuda_objs target)
  if(NOT NOSTALL_HAVE_CUDA)
    return()
  endif()
  file(GLOB _nst_cu CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/gpu/*.cu)
  target_sources(${target} PRIVATE ${_nst_cu})
  # SYSTEM: the toolkit's headers are not held to the project's warnings
  target_include_directories(${target} SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  if(NOSTALL_HAVE_NVJPEG)
    target_include_directories(${target} SYSTEM PRIVATE ${NOSTALL_NVJPEG_INCLUDE})
  endif()
  # --fmad=false: pixel_math.h's double arithmetic must round as the host's.
  target_compile_options(${target} PRIVATE
                         "$<$<COMPILE_LANGUAGE:CUDA>:--fmad=false;-Xcompiler=-Wall>")
  set_target_properties(${target} PROPERTIES CUDA_VISIBILITY_PRESET hidden)
endfunction()
