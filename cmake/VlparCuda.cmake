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

# Adds src/kernels/cuda/*.cu to `target` and defines the ptxas_report target.
function(vlpar_add_cuda_kernels target)
  file(GLOB cu_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/kernels/cuda/*.cu)
  target_sources(${target} PRIVATE ${cu_sources})
  set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "${VLPAR_CUDA_ARCHS}" CUDA_SEPARABLE_COMPILATION OFF)
  target_compile_definitions(${target} PRIVATE VLPAR_WITH_CUDA=1)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo -Xptxas=--warn-on-spills --threads=0 --expt-relaxed-constexpr -Werror=all-warnings>)
  target_link_libraries(${target} PUBLIC CUDA::cudart)
  add_custom_target(ptxas_report
    COMMAND ${CMAKE_COMMAND} -DNVCC=${CMAKE_CUDA_COMPILER} "-DARCHS=${VLPAR_CUDA_ARCHS}"
            -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DOUT=${CMAKE_BINARY_DIR}/ptxas_report.txt
            -P ${PROJECT_SOURCE_DIR}/cmake/ptxas_report.cmake
    COMMENT "ptxas resource usage of every vlpar CUDA kernel"
    VERBATIM)
endfunction()
