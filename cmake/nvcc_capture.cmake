# The CUDA compiler launcher of vlpar's kernels (cmake/VlparCuda.cmake): runs the nvcc command it is given, which
# carries --resource-usage, keeps nvcc's whole output in <RAW_DIR>/<source file name>.txt for the ptxas_report
# target (cmake/ptxas_report.cmake), and passes on everything except ptxas's per-kernel info lines, so the build
# shows warnings and errors as before. The report thus describes the very objects the build produced, from one
# compile per source (a second compile just for the report doubled the CI's cuda stage).
# Usage (script mode): cmake -DRAW_DIR=<dir> -P nvcc_capture.cmake -- <nvcc> <arguments...>
set(cmd "")
set(src "")
set(after_sep OFF)
set(next_is_src OFF)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE 1 ${last})
  set(arg "${CMAKE_ARGV${i}}")
  if(after_sep)
    list(APPEND cmd "${arg}")
    if(next_is_src)
      set(src "${arg}")
      set(next_is_src OFF)
    elseif(arg STREQUAL "-c")
      set(next_is_src ON)
    endif()
  elseif(arg STREQUAL "--")
    set(after_sep ON)
  endif()
endforeach()
if(NOT cmd OR NOT src OR NOT RAW_DIR)
  message(FATAL_ERROR "nvcc_capture.cmake: give -DRAW_DIR=<dir> and `-- <nvcc> ... -c <source> ...`")
endif()
execute_process(COMMAND ${cmd} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
get_filename_component(name "${src}" NAME)
file(MAKE_DIRECTORY "${RAW_DIR}")
file(WRITE "${RAW_DIR}/${name}.txt" "${out}${err}")
# Pass on what is not ptxas's resource report: the report's lines start with "ptxas info" or are its indented
# "N bytes stack frame" continuation lines.
string(REPLACE "\n" ";" lines "${out}${err}")
set(shown "")
foreach(line IN LISTS lines)
  if(line MATCHES "^ptxas info" OR line MATCHES "^ +[0-9]+ bytes stack frame" OR line STREQUAL "")
    continue()
  endif()
  string(APPEND shown "${line}\n")
endforeach()
if(shown)
  execute_process(COMMAND ${CMAKE_COMMAND} -E echo_append "${shown}")
endif()
if(NOT rc EQUAL 0)
  file(REMOVE "${RAW_DIR}/${name}.txt")  # a failed compile leaves no report to read as current
  message(FATAL_ERROR "nvcc exited with ${rc} on ${name}")
endif()
