# The NCCL communicator backend, for CUDA builds only (called from the top-level CMakeLists.txt when
# VLPAR_WITH_CUDA). NCCL ships with the CUDA toolkit here (/usr/local/cuda/include/nccl.h, lib/libnccl.so);
# NCCL_ROOT or CMAKE_PREFIX_PATH can point elsewhere. libnccl is linked by full path, so the exported vlpar target
# needs no extra imported target in consumers.
function(vlpar_add_nccl_backend target)
  find_path(VLPAR_NCCL_INCLUDE_DIR nccl.h
    HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}
    PATH_SUFFIXES include)
  find_library(VLPAR_NCCL_LIBRARY nccl
    HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}
    PATH_SUFFIXES lib lib64)
  if(NOT VLPAR_NCCL_INCLUDE_DIR OR NOT VLPAR_NCCL_LIBRARY)
    message(FATAL_ERROR "vlpar: CUDA build needs NCCL (nccl.h: '${VLPAR_NCCL_INCLUDE_DIR}', "
                        "libnccl: '${VLPAR_NCCL_LIBRARY}'); set NCCL_ROOT")
  endif()
  message(STATUS "vlpar: NCCL ${VLPAR_NCCL_LIBRARY}")
  target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/src/comm/nccl_communicator.cpp)
  target_include_directories(${target} SYSTEM PRIVATE ${VLPAR_NCCL_INCLUDE_DIR})
  target_link_libraries(${target} PUBLIC ${VLPAR_NCCL_LIBRARY})
  target_compile_definitions(${target} PUBLIC VLPAR_WITH_NCCL=1)
endfunction()
