# `cmake --install` exports vlpar::vlpar for find_package(vlpar CONFIG) and a pkg-config file.
include(CMakePackageConfigHelpers)
install(TARGETS vlpar EXPORT vlparTargets
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
