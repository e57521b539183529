# Installs the library, its headers (under include/castor, so that
# `#include <castor.hpp>` works) and a CMake package: find_package(castor).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS castor castor_deps EXPORT castorTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/castor)
install(FILES castor.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/castor)
foreach(layer messages actors rref engine optimizer config)
  install(DIRECTORY ${layer}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/castor/${layer}
    FILES_MATCHING PATTERN "*.hpp")
endforeach()
install(EXPORT castorTargets NAMESPACE castor::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/castor)
configure_package_config_file(cmake/castorConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/castorConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/castor)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/castorConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${CMAKE_CURRENT_BINARY_DIR}/castorConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/castorConfigVersion.cmake
  cmake/Dependencies.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/castor)
