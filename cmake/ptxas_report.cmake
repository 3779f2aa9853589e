# Script mode (cmake -P): compiles every vlpar CUDA source for every architecture with `nvcc --resource-usage`,
# writes a per-kernel table (registers, static shared memory, stack, spills) plus the raw ptxas output to OUT,
# prints the table, and fails if any kernel spills on any architecture.
# Invoked by the `ptxas_report` target: cmake --build <dir> --target ptxas_report
# Inputs (lists joined with '|'): NVCC, ARCHS, SOURCES (the .cu files the build compiles, i.e. after the
# VLPAR_DTYPES filter), DEFINES, SOURCE_DIR, OUT. Without SOURCES every src/kernels/cuda/*.cu is compiled.
#   -DRAW_DIR=<dir>: the target's way: read <dir>/<source name>.txt, the output the build's own compile of each
#   source left there (cmake/nvcc_capture.cmake, the kernels' compiler launcher), instead of compiling again.
string(REPLACE "|" ";" archs "${ARCHS}")
string(REPLACE "|" ";" sources "${SOURCES}")
string(REPLACE "|" ";" defines "${DEFINES}")
if(NOT sources)
  file(GLOB sources ${SOURCE_DIR}/src/kernels/cuda/*.cu)
endif()
set(gencode "")
foreach(arch IN LISTS archs)
  string(REGEX REPLACE "-(real|virtual)$" "" arch_num "${arch}")
  list(APPEND gencode -gencode arch=compute_${arch_num},code=sm_${arch_num})
endforeach()
set(define_flags "")
foreach(d IN LISTS defines)
  list(APPEND define_flags -D${d})
endforeach()
function(ptxas_compile src out_var)
  execute_process(
    COMMAND "${NVCC}" -std=c++20 -O3 -lineinfo --resource-usage -Xptxas=--warn-on-spills --expt-relaxed-constexpr
            ${define_flags} -I${SOURCE_DIR}/include ${gencode} -c "${src}" -o /dev/null
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "nvcc failed on ${src}:\n${out}${err}")
  endif()
  set(${out_var} "${out}${err}" PARENT_SCOPE)
endfunction()
get_filename_component(nvcc_dir "${NVCC}" DIRECTORY)
find_program(CUFILT NAMES cu++filt c++filt HINTS "${nvcc_dir}")  # Itanium mangling: binutils c++filt also works

set(raw "")
set(rows "")
set(n_kernels 0)
set(n_spilling 0)
foreach(src IN LISTS sources)
  get_filename_component(file_name "${src}" NAME)
  if(RAW_DIR)
    if(NOT EXISTS "${RAW_DIR}/${file_name}.txt")
      message(FATAL_ERROR "ptxas_report: no compiler output for ${file_name} in ${RAW_DIR} (its object was built "
                          "before the capturing launcher, or the folder was removed): delete the object or run "
                          "`cmake --build <dir> --target clean`, then build again")
    endif()
    file(READ "${RAW_DIR}/${file_name}.txt" text)
  else()
    ptxas_compile("${src}" text)
  endif()
  set(out "${text}")
  set(err "")
  string(APPEND raw "== ${file_name}\n${text}")
  # One record per kernel and architecture:
  #   Compiling entry function '<mangled>' for 'sm_XX'
  #   Function properties for <mangled>
  #       S bytes stack frame, A bytes spill stores, B bytes spill loads
  #   Used R registers, used N barriers[, M bytes smem]
  string(REPLACE "\n" ";" lines "${out}${err}")
  set(kernel "")
  foreach(line IN LISTS lines)
    if(line MATCHES "Compiling entry function '([^']+)' for '(sm_[0-9a-z]+)'")
      set(kernel "${CMAKE_MATCH_1}")
      set(arch "${CMAKE_MATCH_2}")
    elseif(kernel AND line MATCHES "Function properties for ([^ ]+)")
      # nvcc compiles the architectures in parallel (--threads=0): a record must still be contiguous, or its
      # registers would be reported against another kernel.
      if(NOT CMAKE_MATCH_1 STREQUAL kernel)
        message(FATAL_ERROR "ptxas_report: interleaved ptxas output in ${file_name} (${kernel} / ${CMAKE_MATCH_1})")
      endif()
    elseif(kernel AND line MATCHES "([0-9]+) bytes stack frame, ([0-9]+) bytes spill stores, ([0-9]+) bytes spill")
      set(stack "${CMAKE_MATCH_1}")
      set(spill_st "${CMAKE_MATCH_2}")
      set(spill_ld "${CMAKE_MATCH_3}")
    elseif(kernel AND line MATCHES "Used ([0-9]+) registers")
      set(regs "${CMAKE_MATCH_1}")
      set(smem 0)
      if(line MATCHES "([0-9]+) bytes smem")
        set(smem "${CMAKE_MATCH_1}")
      endif()
      set(name "${kernel}")
      if(CUFILT)
        execute_process(COMMAND "${CUFILT}" "${kernel}" OUTPUT_VARIABLE name OUTPUT_STRIP_TRAILING_WHITESPACE)
        string(REGEX REPLACE "^void " "" name "${name}")
        string(REPLACE "(anonymous namespace)::" "" name "${name}")  # before cutting the argument list at "("
        string(REGEX REPLACE "\\(.*$" "" name "${name}")
        string(REPLACE "vlpar::cuda_kernels::" "" name "${name}")
        string(REPLACE "vlpar::" "" name "${name}")
      endif()
      string(LENGTH "${arch}" l)
      math(EXPR pad "7 - ${l}")
      string(REPEAT " " ${pad} spaces)
      set(row "${arch}${spaces}")
      foreach(field IN ITEMS "${regs}" "${smem}" "${stack}" "${spill_st}/${spill_ld}")
        string(LENGTH "${field}" l)
        math(EXPR pad "12 - ${l}")
        string(REPEAT " " ${pad} spaces)
        string(APPEND row "${spaces}${field}")
      endforeach()
      string(APPEND rows "${row}  ${name}  [${file_name}]\n")
      math(EXPR n_kernels "${n_kernels} + 1")
      if(NOT spill_st EQUAL 0 OR NOT spill_ld EQUAL 0)
        math(EXPR n_spilling "${n_spilling} + 1")
        message(WARNING "${file_name} ${arch}: ${name} spills ${spill_st} B stores / ${spill_ld} B loads")
      endif()
      set(kernel "")
    endif()
  endforeach()
endforeach()

# smem: static bytes (dynamic shared memory is chosen per launch); stack: local memory frame (not a spill).
set(header "arch   ")
foreach(field IN ITEMS regs smem stack "spill st/ld")
  string(LENGTH "${field}" l)
  math(EXPR pad "12 - ${l}")
  string(REPEAT " " ${pad} spaces)
  string(APPEND header "${spaces}${field}")
endforeach()
string(APPEND header "  kernel [file]\n")
set(table "${header}${rows}")
file(WRITE "${OUT}"
     "${table}\n${n_kernels} kernel builds, ${n_spilling} with spills\n\n--- raw ptxas output ---\n${raw}")
message("${table}")
if(n_spilling GREATER 0)
  message(FATAL_ERROR "ptxas: ${n_spilling} of ${n_kernels} kernel builds spill registers (report: ${OUT})")
endif()
message(STATUS "ptxas: ${n_kernels} kernel builds, no spills (report: ${OUT})")
