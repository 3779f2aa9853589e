# Script mode (cmake -P): compiles every src/kernels/cuda/*.cu for every architecture with
# `nvcc --resource-usage`, writes the per-kernel report to OUT and fails if any kernel spills.
# Invoked by the `ptxas_report` target: cmake --build <dir> --target ptxas_report
file(GLOB cu_sources ${SOURCE_DIR}/src/kernels/cuda/*.cu)
set(report "")
set(spills 0)
foreach(arch IN LISTS ARCHS)
  string(REGEX REPLACE "-(real|virtual)$" "" arch_num "${arch}")
  foreach(src IN LISTS cu_sources)
    execute_process(
      COMMAND ${NVCC} -std=c++20 -O3 -lineinfo --resource-usage -Xptxas=--warn-on-spills --expt-relaxed-constexpr
              -DVLPAR_WITH_CUDA=1 -I${SOURCE_DIR}/include
              -gencode arch=compute_${arch_num},code=sm_${arch_num} -c ${src} -o /dev/null
      OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "nvcc failed on ${src} for sm_${arch_num}:\n${err}")
    endif()
    get_filename_component(name ${src} NAME)
    string(APPEND report "== ${name} sm_${arch_num}\n${out}${err}")
    string(REGEX MATCHALL "[1-9][0-9]* bytes spill (stores|loads)" found "${out}${err}")
    if(found)
      math(EXPR spills "${spills} + 1")
      message(WARNING "${name} sm_${arch_num}: ${found}")
    endif()
  endforeach()
endforeach()
file(WRITE ${OUT} "${report}")
message("${report}")
if(spills GREATER 0)
  message(FATAL_ERROR "ptxas: ${spills} kernel builds spill registers (report: ${OUT})")
endif()
message(STATUS "ptxas: no spills in any kernel (report: ${OUT})")
