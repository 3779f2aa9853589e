# `cmake --install` exports the components (vlpar::core, ::kernels, ::comm, ::nn, ::parallel, ::io, ::obs, ::data)
# and the umbrella vlpar::vlpar for find_package(vlpar CONFIG [COMPONENTS ...]), and a pkg-config file.
include(CMakePackageConfigHelpers)
get_property(VLPAR_COMPONENT_TARGETS GLOBAL PROPERTY VLPAR_COMPONENTS)
install(TARGETS vlpar ${VLPAR_COMPONENT_TARGETS} EXPORT vlparTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY include/vlpar DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT vlparTargets NAMESPACE vlpar:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/vlpar)
export(EXPORT vlparTargets NAMESPACE vlpar:: FILE ${CMAKE_BINARY_DIR}/vlparTargets.cmake)
configure_package_config_file(cmake/vlparConfig.cmake.in ${CMAKE_BINARY_DIR}/vlparConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/vlpar)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/vlparConfigVersion.cmake COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/vlparConfig.cmake ${CMAKE_BINARY_DIR}/vlparConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/vlpar)
configure_file(cmake/vlpar.pc.in ${CMAKE_BINARY_DIR}/vlpar.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/vlpar.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
