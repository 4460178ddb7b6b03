# What `cmake --install` puts under the prefix (docs/install.md):
#   lib/       libhcomm.so.0 (+ links), libhcomm.a
#   lib/cmake/hcomm/  hcommConfig.cmake: find_package(hcomm) -> hcomm::hcomm,
#              hcomm::hcomm_static (the archive, linked whole, with its deps)
#   lib/pkgconfig/hcomm.pc  (variable static_libs: the static recipe)
#   include/   the public headers
#   bin/       hcommrun, hcomm_info, hcomm_stats, hcomm-hugepages, and the
#              benchmarks renamed hcomm-<name> (pingpong -> hcomm-pingpong,
#              allreduce_bw -> hcomm-allreduce-bw): the build tree keeps the
#              short names that tests and scripts use
#   share/doc/hcomm/  README.md and docs/
# Included at the end of the root CMakeLists.txt, after every target exists.
include(CMakePackageConfigHelpers)

set(HCOMM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/hcomm)

# The same name as the installed package, for projects that add_subdirectory()
# or FetchContent this tree.
if(NOT TARGET hcomm::hcomm)
  add_library(hcomm::hcomm ALIAS hcomm)
endif()

# Libraries, each linked by name (-lhwloc...) from the static archive's users:
# the pkg-config file and hcomm::hcomm_static carry the same list.
set(HCOMM_STATIC_DEPS hwloc numa)
if(HCOMM_HAVE_VERBS)
  list(APPEND HCOMM_STATIC_DEPS ibverbs)
endif()
list(APPEND HCOMM_STATIC_DEPS pthread m ${CMAKE_DL_LIBS})
list(TRANSFORM HCOMM_STATIC_DEPS PREPEND -l OUTPUT_VARIABLE _pc_libs)
list(JOIN _pc_libs " " HCOMM_PC_PRIVATE_LIBS)

# hcomm.pc finds its prefix from its own place (${pcfiledir}), so a prefix,
# a DESTDIR staging tree or a `dpkg -x` root can be moved as a whole.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(HCOMM_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(HCOMM_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  file(RELATIVE_PATH _rel /hcomm-prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /hcomm-prefix)
  string(REGEX REPLACE "/$" "" _rel "${_rel}")
  set(HCOMM_PC_PREFIX "\${pcfiledir}/${_rel}")
  set(HCOMM_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(HCOMM_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(HCOMM_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/hcomm.pc.in ${PROJECT_BINARY_DIR}/hcomm.pc @ONLY)

# Libraries and headers. The archive is exported as hcomm::hcomm_archive;
# hcommConfig.cmake wraps it into hcomm::hcomm_static (whole archive + deps).
set_target_properties(hcomm_static PROPERTIES EXPORT_NAME hcomm_archive)
install(TARGETS hcomm hcomm_static EXPORT hcommTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/hcomm.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The CMake package.
install(EXPORT hcommTargets NAMESPACE hcomm:: DESTINATION ${HCOMM_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/hcommConfig.cmake.in
  ${PROJECT_BINARY_DIR}/hcommConfig.cmake INSTALL_DESTINATION ${HCOMM_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/hcommConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/hcommConfig.cmake ${PROJECT_BINARY_DIR}/hcommConfigVersion.cmake
        DESTINATION ${HCOMM_CMAKE_DIR})

# Tools. Their install rules live in tools/ and bench/; here they get a
# RUNPATH that finds the installed libhcomm.so.0 from bin/ wherever the prefix
# ends up ($ORIGIN/../lib), and the benchmarks their hcomm- names.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(_rpath "${CMAKE_INSTALL_LIBDIR}")
else()
  file(RELATIVE_PATH _rel /hcomm-prefix/${CMAKE_INSTALL_BINDIR} /hcomm-prefix/${CMAKE_INSTALL_LIBDIR})
  set(_rpath "$ORIGIN/${_rel}")
endif()
set(_renames "")
foreach(dir tools bench)
  get_property(_targets DIRECTORY ${PROJECT_SOURCE_DIR}/${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(t ${_targets})
    get_target_property(_type ${t} TYPE)
    if(_type STREQUAL "EXECUTABLE")
      set_target_properties(${t} PROPERTIES INSTALL_RPATH "${_rpath}")
      if(dir STREQUAL "bench")
        string(REPLACE "_" "-" _dashed ${t})
        list(APPEND _renames "$<TARGET_FILE_NAME:${t}>" "hcomm-${_dashed}")
      endif()
    endif()
  endforeach()
endforeach()
install(PROGRAMS ${PROJECT_SOURCE_DIR}/hugepages/hcomm-hugepages DESTINATION ${CMAKE_INSTALL_BINDIR}
        OPTIONAL)
# Runs after bench/'s install rules (CMP0082): renames what they installed
# (a benchmark that is not installed, like mem_bench, is skipped) and keeps
# install_manifest.txt true.
install(CODE "
  set(_bindir \"${CMAKE_INSTALL_BINDIR}\")
  if(NOT IS_ABSOLUTE \"\${_bindir}\")
    set(_bindir \"\${CMAKE_INSTALL_PREFIX}/\${_bindir}\")
  endif()
  set(_renames \"${_renames}\")
  while(_renames)
    list(POP_FRONT _renames _from _to)
    set(_src \"\$ENV{DESTDIR}\${_bindir}/\${_from}\")
    if(EXISTS \"\${_src}\")
      message(STATUS \"Renaming: \${_bindir}/\${_from} -> \${_to}\")
      file(RENAME \"\${_src}\" \"\$ENV{DESTDIR}\${_bindir}/\${_to}\")
      list(REMOVE_ITEM CMAKE_INSTALL_MANIFEST_FILES \"\$ENV{DESTDIR}\${_bindir}/\${_from}\")
      list(APPEND CMAKE_INSTALL_MANIFEST_FILES \"\$ENV{DESTDIR}\${_bindir}/\${_to}\")
    endif()
  endwhile()
")

# `cmake --install --strip` and the package strip the binaries; the archive
# keeps its symbols and loses only its debug sections.
install(CODE "
  if(CMAKE_INSTALL_DO_STRIP AND NOT \"${CMAKE_STRIP}\" STREQUAL \"\")
    set(_libdir \"${CMAKE_INSTALL_LIBDIR}\")
    if(NOT IS_ABSOLUTE \"\${_libdir}\")
      set(_libdir \"\${CMAKE_INSTALL_PREFIX}/\${_libdir}\")
    endif()
    execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-debug
      \"\$ENV{DESTDIR}\${_libdir}/$<TARGET_FILE_NAME:hcomm_static>\")
  endif()
")

# Documentation: the README and docs/ keep their layout, so the links between
# them still work under share/doc/hcomm.
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs
        FILES_MATCHING PATTERN "*.md" PATTERN "*.png" PATTERN "*.svg")
