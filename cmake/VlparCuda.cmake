# Optional CUDA: VLPAR_ENABLE_CUDA=AUTO builds the kernels when nvcc is found, OFF never looks for it.
# Every kernel is compiled with -lineinfo and ptxas spill warnings; the `ptxas_report` target prints the
# resource usage (registers, shared memory, spills) of every kernel for every architecture and fails on spills.
set(VLPAR_WITH_CUDA OFF)
if(NOT VLPAR_ENABLE_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES ${VLPAR_CUDA_ARCHS})
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    if(CUDAToolkit_VERSION VERSION_LESS 12.0)
      message(FATAL_ERROR "vlpar needs CUDA >= 12, found ${CUDAToolkit_VERSION}")
    endif()
    # CMake < 3.26 knows no C++20 flag for nvcc (which has had -std=c++20 since CUDA 12.0) and would refuse
    # CMAKE_CUDA_STANDARD 20 as an unknown dialect.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(VLPAR_WITH_CUDA ON)
    message(STATUS "vlpar: CUDA ${CUDAToolkit_VERSION}, architectures ${VLPAR_CUDA_ARCHS}")
  elseif(VLPAR_ENABLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "VLPAR_ENABLE_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER)")
  else()
    message(STATUS "vlpar: no CUDA compiler found, building CPU-only")
  endif()
else()
  message(STATUS "vlpar: CUDA switched off, building CPU-only")
endif()

# Storage dtypes whose CUDA kernels are compiled (STYLE §6 build budget). The generated instantiation files are
# named <kernel>_<dtype>.cu (tools/gen_instantiations.py); those of other dtypes are left out of the build, and
# the ops answer kNotSupported "this build of vlpar was compiled without <dtype> CUDA kernels" at runtime.
set(VLPAR_DTYPES "f32;bf16;f16" CACHE STRING "Storage dtypes of the CUDA kernels to build (subset of f32;bf16;f16)")
# Kernel head dims of the flash-attention instantiations (files <family>_hd<HD>_<dtype>.cu); a head dim runs the
# smallest compiled one >= it (72, 80 -> 96). Leaving one out makes those head dims answer kNotSupported.
set(VLPAR_ATTN_HEAD_DIMS "64;96;128" CACHE STRING "Kernel head dims of the CUDA attention kernels (subset of 64;96;128)")

# The CUDA kernel sources of this build: src/kernels/cuda/*.cu with the instantiation files of the dtypes in
# VLPAR_DTYPES, and the VLPAR_CUDA_DTYPE_<DT>=1 definitions that tell cuda_ops.cu which dtypes exist. Shared by
# the nvcc build (vlpar_add_cuda_kernels) and the emulated build (cmake/VlparCudaEmu.cmake).
function(vlpar_cuda_kernel_sources sources_var defs_var)
  set(known_dtypes f32 bf16 f16)
  if(NOT VLPAR_DTYPES)
    message(FATAL_ERROR "VLPAR_DTYPES is empty; list at least one of: ${known_dtypes}")
  endif()
  set(dtype_defs "")
  foreach(dt IN LISTS VLPAR_DTYPES)
    if(NOT dt IN_LIST known_dtypes)
      message(FATAL_ERROR "VLPAR_DTYPES: unknown dtype '${dt}' (known: ${known_dtypes})")
    endif()
    string(TOUPPER "${dt}" DT)
    list(APPEND dtype_defs VLPAR_CUDA_DTYPE_${DT}=1)
  endforeach()
  set(known_head_dims 64 96 128)
  foreach(hd IN LISTS VLPAR_ATTN_HEAD_DIMS)
    if(NOT hd IN_LIST known_head_dims)
      message(FATAL_ERROR "VLPAR_ATTN_HEAD_DIMS: unknown kernel head dim '${hd}' (known: ${known_head_dims})")
    endif()
    list(APPEND dtype_defs VLPAR_CUDA_ATTN_HD_${hd}=1)
  endforeach()
  file(GLOB all_cu CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/kernels/cuda/*.cu)
  set(cu_sources "")
  foreach(src IN LISTS all_cu)
    get_filename_component(stem ${src} NAME_WE)
    if(stem MATCHES "_(f32|bf16|f16)$" AND NOT CMAKE_MATCH_1 IN_LIST VLPAR_DTYPES)
      continue()
    endif()
    if(stem MATCHES "_hd([0-9]+)_" AND NOT CMAKE_MATCH_1 IN_LIST VLPAR_ATTN_HEAD_DIMS)
      continue()
    endif()
    list(APPEND cu_sources ${src})
  endforeach()
  list(LENGTH cu_sources n_cu)
  message(STATUS "vlpar: CUDA kernel dtypes ${VLPAR_DTYPES} (${n_cu} .cu files)")
  set(${sources_var} ${cu_sources} PARENT_SCOPE)
  set(${defs_var} ${dtype_defs} PARENT_SCOPE)
endfunction()

# Adds the CUDA kernels to `target` (src/kernels/cuda/*.cu, instantiation files filtered by VLPAR_DTYPES) and
# defines the ptxas_report target over the same compiles (a user's CMAKE_CUDA_COMPILER_LAUNCHER, e.g. ccache, runs
# inside vlpar's capturing launcher).
set(VLPAR_CUDA_WERROR "")  # nvcc's warnings (ptxas spills included) as errors unless VLPAR_WERROR is OFF
if(VLPAR_WERROR)
  set(VLPAR_CUDA_WERROR -Werror=all-warnings)
endif()

function(vlpar_add_cuda_kernels target)
  vlpar_cuda_kernel_sources(cu_sources dtype_defs)
  # The .cu files are their own object library, <target>_cuda, whose objects join <target>: CI's cuda stage
  # builds it (and core and comm, whose host code changes with CUDA) without the CPU kernels, which compile the
  # same with CUDA on or off and are built by the CPU stage.
  set(cuda_objs ${target}_cuda)
  add_library(${cuda_objs} OBJECT ${cu_sources})
  target_link_libraries(${cuda_objs} PRIVATE vlpar_core CUDA::cudart)
  target_sources(${target} PRIVATE $<TARGET_OBJECTS:${cuda_objs}>)
  set_target_properties(${cuda_objs} PROPERTIES CUDA_ARCHITECTURES "${VLPAR_CUDA_ARCHS}"
                                                CUDA_SEPARABLE_COMPILATION OFF)
  # FMT_USE_CONSTEXPR=1: fmt 9 switches constexpr off when it sees nvcc, which leaves its consteval format-string
  # checks calling non-constexpr helpers (a hard error in the CUDA front end); the host compiler handles them.
  # VLPAR_CUDA_RUNTIME_INCLUDED: lets host .cpp files that include <cuda_runtime.h> use VLPAR_CUDA_CHECK
  # (status.hpp only defines it for nvcc otherwise).
  target_compile_definitions(${target} PRIVATE VLPAR_WITH_CUDA=1 VLPAR_CUDA_RUNTIME_INCLUDED=1)
  target_compile_definitions(${cuda_objs} PRIVATE VLPAR_WITH_CUDA=1 FMT_USE_CONSTEXPR=1 ${dtype_defs})
  target_compile_options(${cuda_objs} PRIVATE
    -lineinfo -Xptxas=--warn-on-spills --threads=0 --expt-relaxed-constexpr ${VLPAR_CUDA_WERROR})
  target_link_libraries(${target} PUBLIC CUDA::cudart)

  # ptxas's resource usage comes from the build's own compiles: --resource-usage on every kernel source, whose
  # output the launcher (cmake/nvcc_capture.cmake) keeps per source under <build>/ptxas/; ptxas_report then reads
  # those files (no second compile). Spills already fail the compile itself (--warn-on-spills as an error).
  set(raw_dir ${CMAKE_BINARY_DIR}/ptxas)
  target_compile_options(${cuda_objs} PRIVATE --resource-usage)
  set(launcher ${CMAKE_COMMAND} -DRAW_DIR=${raw_dir} -P ${PROJECT_SOURCE_DIR}/cmake/nvcc_capture.cmake --
      ${CMAKE_CUDA_COMPILER_LAUNCHER})
  set_target_properties(${cuda_objs} PROPERTIES CUDA_COMPILER_LAUNCHER "${launcher}")
  string(REPLACE ";" "|" report_sources "${cu_sources}")
  string(REPLACE ";" "|" report_archs "${VLPAR_CUDA_ARCHS}")
  add_custom_target(ptxas_report
    COMMAND ${CMAKE_COMMAND} -DNVCC=${CMAKE_CUDA_COMPILER} "-DARCHS=${report_archs}" "-DSOURCES=${report_sources}"
            -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DOUT=${CMAKE_BINARY_DIR}/ptxas_report.txt
            -DRAW_DIR=${raw_dir} -P ${PROJECT_SOURCE_DIR}/cmake/ptxas_report.cmake
    DEPENDS ${cuda_objs}
    COMMENT "ptxas resource usage of every vlpar CUDA kernel (from the build of ${cuda_objs})"
    VERBATIM)
endfunction()
