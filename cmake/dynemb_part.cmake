# dynemb_add_part(<part> SOURCES <files...> DEPENDS <lower part targets...>
#                 [PRIVATE_LIBRARIES <libraries...>])
# One library per part (docs/architecture.md): target dynemb_<part> (alias dynemb::dynemb_<part>),
# static or shared by BUILD_SHARED_LIBS. Its sources see the public headers (include/) and their
# own folder src/<part>/ only, so a private header of another part is not found; it links only
# the parts below it (DEPENDS), and, shared, it must resolve every symbol from them
# (--no-undefined), so a call into a part above fails to link. scripts/check_arrows.py, run
# before every part is compiled, refuses an include that points up.
include_guard(GLOBAL)
include(GNUInstallDirs)

function(dynemb_add_part part)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES;DEPENDS;PRIVATE_LIBRARIES")
  set(target dynemb_${part})
  add_library(${target} ${arg_SOURCES})
  add_library(dynemb::${target} ALIAS ${target})
  target_include_directories(
    ${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                     $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE ${PROJECT_SOURCE_DIR}/src/${part})
  target_link_libraries(${target} PUBLIC ${arg_DEPENDS} PRIVATE ${arg_PRIVATE_LIBRARIES})
  # Position-independent, so a static part can go into a shared object (the Python module);
  # without semantic interposition, so that costs no inlining.
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -fno-semantic-interposition>
    $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>)
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON
                                             CUDA_SEPARABLE_COMPILATION OFF)
  if(BUILD_SHARED_LIBS)
    target_link_options(${target} PRIVATE LINKER:--no-undefined)
    # Installed, a part finds the parts below it next to itself.
    set_target_properties(${target} PROPERTIES
      VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
      INSTALL_RPATH "$ORIGIN")
  endif()
  if(TARGET dynemb_check_arrows)
    add_dependencies(${target} dynemb_check_arrows)
  endif()
  set_property(GLOBAL APPEND PROPERTY DYNEMB_PARTS ${target})
endfunction()
