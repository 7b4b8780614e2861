# `cmake --install`: the public headers, every part's library and a CMake package, so that a
# project can `find_package(dynemb CONFIG)` and link dynemb::dynemb (every part) or one part
# (dynemb::dynemb_table, ...). A static and a shared build may be installed into one prefix:
# each writes its own targets file, and dynembConfig.cmake picks one (docs/architecture.md).
include(CMakePackageConfigHelpers)
include(GNUInstallDirs)

if(BUILD_SHARED_LIBS)
  set(DYNEMB_LIBRARY_KIND shared)
else()
  set(DYNEMB_LIBRARY_KIND static)
endif()
set(DYNEMB_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/dynemb)

get_property(dynemb_parts GLOBAL PROPERTY DYNEMB_PARTS)
install(TARGETS ${dynemb_parts} dynemb EXPORT dynemb-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/dynemb DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT dynemb-targets NAMESPACE dynemb::
        FILE dynemb-${DYNEMB_LIBRARY_KIND}-targets.cmake DESTINATION ${DYNEMB_PACKAGE_DIR})

configure_file(${PROJECT_SOURCE_DIR}/cmake/dynemb-dependencies.cmake.in
               ${PROJECT_BINARY_DIR}/dynemb-${DYNEMB_LIBRARY_KIND}-dependencies.cmake @ONLY)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/dynembConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/dynembConfig.cmake
                              INSTALL_DESTINATION ${DYNEMB_PACKAGE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dynembConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dynembConfig.cmake
              ${PROJECT_BINARY_DIR}/dynembConfigVersion.cmake
              ${PROJECT_BINARY_DIR}/dynemb-${DYNEMB_LIBRARY_KIND}-dependencies.cmake
        DESTINATION ${DYNEMB_PACKAGE_DIR})
