# VLPAR_CUDA_EMULATION=ON (preset `emu`): the CPU build plus vlpar's CUDA kernels compiled by the host compiler
# and run on the CPU (docs/cuda-emulation.md). Not a second implementation: the same src/kernels/cuda/*.cu files
# that nvcc compiles, built with VLPAR_CUDA_EMU=1 against <cuda_runtime.h> (headers only, no GPU, no libcudart):
#   vlpar_cudart_emu : the CUDA runtime API vlpar uses (device memory, copies, streams, events, attributes) over
#                      host memory with guard pages (src/kernels/cuda/emu/device_memory.cpp); core links it where a
#                      CUDA build links libcudart
#   vlpar_cuda_emu   : the fiber runtime that runs kernel launches (Boost.Context), with the checks
#   vlpar_kernels    : + the .cu files as C++, instrumented (-fsanitize=thread without its runtime: the emulator
#                      defines the hooks, emu/access_hooks.cpp) so every load and store of kernel code is checked
# The public ops then serve Device::cuda(0) views with the emulated kernels; tests/gpu runs as Emu* (label emu).
option(VLPAR_CUDA_EMULATION "Run vlpar's CUDA kernels on the CPU (emulated build; needs CUDA headers, no GPU)" OFF)

function(vlpar_add_cuda_emulation)
  if(VLPAR_WITH_CUDA)
    message(FATAL_ERROR "VLPAR_CUDA_EMULATION=ON is the CPU build of the CUDA sources; switch VLPAR_ENABLE_CUDA "
                        "off (presets: `emu` or `cuda`, not both)")
  endif()
  find_path(VLPAR_CUDA_HEADERS cuda_runtime.h
    HINTS ${CUDAToolkit_ROOT}/include $ENV{CUDA_PATH}/include /usr/local/cuda/include
    DOC "directory of cuda_runtime.h (CUDA toolkit headers) for the emulated build")
  if(NOT VLPAR_CUDA_HEADERS)
    message(FATAL_ERROR "VLPAR_CUDA_EMULATION=ON needs the CUDA toolkit headers (cuda_runtime.h); set "
                        "CUDAToolkit_ROOT or VLPAR_CUDA_HEADERS")
  endif()
  find_package(Boost 1.74 REQUIRED COMPONENTS context)
  set(emu_dir ${PROJECT_SOURCE_DIR}/src/kernels/cuda/emu)

  vlpar_component(cudart_emu SOURCES ${emu_dir}/device_memory.cpp PUBLIC fmt::fmt)
  target_include_directories(vlpar_cudart_emu SYSTEM PUBLIC $<BUILD_INTERFACE:${VLPAR_CUDA_HEADERS}>)
  target_compile_definitions(vlpar_cudart_emu PRIVATE VLPAR_CUDA_EMU=1)
  target_link_libraries(vlpar_core PUBLIC vlpar_cudart_emu)
  target_compile_definitions(vlpar_core PRIVATE VLPAR_WITH_CUDA=1 VLPAR_CUDA_EMU=1 VLPAR_CUDA_RUNTIME_INCLUDED=1)

  vlpar_component(cuda_emu SOURCES ${emu_dir}/runtime.cpp ${emu_dir}/launch.cpp ${emu_dir}/shared_memory.cpp
                  ${emu_dir}/access_hooks.cpp ${emu_dir}/warp_matrix.cpp ${emu_dir}/async_copy.cpp
                  ${emu_dir}/atomics.cpp
                  PUBLIC vlpar_core vlpar_cudart_emu PRIVATE Boost::context ${CMAKE_DL_LIBS})
  target_compile_definitions(vlpar_cuda_emu PRIVATE VLPAR_CUDA_EMU=1)

  vlpar_cuda_kernel_sources(cu_sources dtype_defs)
  # How a .cu file becomes an emulated kernel source (also tests/emu/*.cu): C++, every load and store
  # instrumented for the checks, no FMA contraction (docs/cuda-emulation.md, "Floating point").
  set(VLPAR_EMU_CU_OPTIONS -xc++ -fsanitize=thread --param=tsan-instrument-func-entry-exit=0 -ffp-contract=off
                           -Wno-tsan -Wno-unknown-pragmas CACHE INTERNAL "compile options of emulated .cu files")
  set_source_files_properties(${cu_sources} PROPERTIES LANGUAGE CXX COMPILE_OPTIONS "${VLPAR_EMU_CU_OPTIONS}")
  target_sources(vlpar_kernels PRIVATE ${cu_sources})
  target_include_directories(vlpar_kernels PRIVATE ${PROJECT_SOURCE_DIR}/src/kernels/cuda)
  target_compile_definitions(vlpar_kernels PRIVATE VLPAR_WITH_CUDA=1 VLPAR_CUDA_EMU=1 VLPAR_CUDA_RUNTIME_INCLUDED=1
                                                   ${dtype_defs})
  target_link_libraries(vlpar_kernels PUBLIC vlpar_cuda_emu)
  # pkg-config (cmake/vlpar.pc.in): the emulator libraries go after what uses them.
  set(VLPAR_PC_EMU_KERNELS "-lvlpar_cuda_emu " PARENT_SCOPE)
  set(VLPAR_PC_EMU_CORE "-lvlpar_cudart_emu -lboost_context -ldl " PARENT_SCOPE)
  message(STATUS "vlpar: CUDA emulation on (kernels run on the CPU; CUDA headers ${VLPAR_CUDA_HEADERS})")
endfunction()
