# What `cmake --install` puts under the prefix (docs/install.md):
#   lib/       libhcomm.so.0 (+ links), libhcomm.a
#   lib/cmake/hcomm/  hcommConfig.cmake: find_package(hcomm) -> hcomm::hcomm,
#              hcomm::hcomm_static (the archive, linked whole, with its deps)
#   lib/pkgconfig/hcomm.pc  (naming the prefix installed to; variable
#              static_libs: the static recipe)
#   include/   the public headers
#   bin/       hcommrun, hcomm_info, hcomm_stats, hcomm-hugepages, and the
#              benchmarks renamed hcomm-<name> (pingpong -> hcomm-pingpong,
#              allreduce_bw -> hcomm-allreduce-bw): the build tree keeps the
#              short names that tests and scripts use
#   share/doc/hcomm/  README.md and docs/
# The build tree itself serves as a prefix too: hcommConfig.cmake with its
# hcommTargets.cmake (-Dhcomm_DIR=build) and hcomm-uninstalled.pc
# (PKG_CONFIG_PATH=build).
# Included at the end of the root CMakeLists.txt, after every target exists.
include(CMakePackageConfigHelpers)

set(HCOMM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/hcomm)

# The same name as the installed package, for projects that add_subdirectory()
# or FetchContent this tree.
if(NOT TARGET hcomm::hcomm)
  add_library(hcomm::hcomm ALIAS hcomm)
endif()

# What the static archive's users link after it, derived from what the
# library objects link (hcomm_obj's INTERFACE_LINK_LIBRARIES, complete here at
# the end of the configure), so a dependency a module adds reaches hcomm.pc
# and hcomm::hcomm_static by itself: a pkg-config target gives its libraries
# (a full path becomes -l<name>, plus -L<dir> outside the compiler's own
# directories) and link options; Threads::Threads is -lpthread.
#   HCOMM_STATIC_LIBS  names (hwloc numa ibverbs pthread m dl)
#   HCOMM_STATIC_DIRS  -L directories
#   HCOMM_STATIC_OPTS  other link options, in order
function(_hcomm_static_deps item)
  if(item MATCHES "^::@" OR item MATCHES "^\\$<")
    # directory markers; generator expressions (none today)
  elseif(item STREQUAL "Threads::Threads")
    set_property(GLOBAL APPEND PROPERTY _hcomm_static_libs pthread)
  elseif(TARGET ${item})
    get_target_property(_deps ${item} INTERFACE_LINK_LIBRARIES)
    foreach(d IN LISTS _deps)
      if(d)
        _hcomm_static_deps(${d})
      endif()
    endforeach()
    get_target_property(_opts ${item} INTERFACE_LINK_OPTIONS)
    if(_opts)
      set_property(GLOBAL APPEND PROPERTY _hcomm_static_opts ${_opts})
    endif()
  elseif(IS_ABSOLUTE "${item}" AND item MATCHES "/lib([^/]+)\\.(so|a)(\\.[0-9.]+)?$")
    set_property(GLOBAL APPEND PROPERTY _hcomm_static_libs ${CMAKE_MATCH_1})
    get_filename_component(_dir "${item}" DIRECTORY)
    if(NOT _dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
      set_property(GLOBAL APPEND PROPERTY _hcomm_static_dirs ${_dir})
    endif()
  elseif(item MATCHES "^-")
    set_property(GLOBAL APPEND PROPERTY _hcomm_static_opts ${item})
  else()
    set_property(GLOBAL APPEND PROPERTY _hcomm_static_libs ${item})
  endif()
endfunction()
get_target_property(_deps hcomm_obj INTERFACE_LINK_LIBRARIES)
foreach(d IN LISTS _deps CMAKE_DL_LIBS)
  _hcomm_static_deps(${d})
endforeach()
get_property(HCOMM_STATIC_LIBS GLOBAL PROPERTY _hcomm_static_libs)
get_property(HCOMM_STATIC_DIRS GLOBAL PROPERTY _hcomm_static_dirs)
get_property(HCOMM_STATIC_OPTS GLOBAL PROPERTY _hcomm_static_opts)
list(REMOVE_DUPLICATES HCOMM_STATIC_LIBS)
list(REMOVE_DUPLICATES HCOMM_STATIC_DIRS)
list(TRANSFORM HCOMM_STATIC_DIRS PREPEND -L OUTPUT_VARIABLE _pc_dirs)
list(TRANSFORM HCOMM_STATIC_LIBS PREPEND -l OUTPUT_VARIABLE _pc_libs)
list(JOIN _pc_dirs " " _pc_dirs)
list(JOIN _pc_libs " " _pc_libs)
list(JOIN HCOMM_STATIC_OPTS " " HCOMM_STATIC_OPTS)
set(HCOMM_STATIC_LINK_OPTIONS "") # for hcomm::hcomm_static, kept in order
if(HCOMM_STATIC_OPTS)
  set(HCOMM_STATIC_LINK_OPTIONS "SHELL:${HCOMM_STATIC_OPTS}")
endif()
string(STRIP "${_pc_dirs} ${_pc_libs} ${HCOMM_STATIC_OPTS}" HCOMM_PC_PRIVATE_LIBS)

# hcomm.pc names its prefix as installed: the build tree's copy has the
# configured prefix, and install writes the one it installs to (--prefix;
# /usr in the Debian package, which installs through DESTDIR). An unpacked
# tree elsewhere is used with PKG_CONFIG_SYSROOT_DIR (docs/install.md).
set(HCOMM_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
foreach(d LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${d}}")
    set(HCOMM_PC_${d} "${CMAKE_INSTALL_${d}}")
  else()
    set(HCOMM_PC_${d} "\${prefix}/${CMAKE_INSTALL_${d}}")
  endif()
endforeach()
configure_file(${PROJECT_SOURCE_DIR}/hcomm.pc.in ${PROJECT_BINARY_DIR}/hcomm.pc @ONLY)

# The build tree used as installed, without installing (docs/install.md,
# "From the build tree"): hcomm-uninstalled.pc, which pkg-config takes
# before hcomm.pc from the same folder (PKG_CONFIG_PATH=build), names the
# build's lib/ and the source's include/; and hcommTargets.cmake below
# (-Dhcomm_DIR=build).
set(HCOMM_PC_PREFIX "${PROJECT_BINARY_DIR}")
set(HCOMM_PC_LIBDIR "${CMAKE_LIBRARY_OUTPUT_DIRECTORY}")
set(HCOMM_PC_INCLUDEDIR "${PROJECT_SOURCE_DIR}/include")
configure_file(${PROJECT_SOURCE_DIR}/hcomm.pc.in ${PROJECT_BINARY_DIR}/hcomm-uninstalled.pc @ONLY)

# Libraries and headers. The archive is exported as hcomm::hcomm_archive;
# hcommConfig.cmake wraps it into hcomm::hcomm_static (whole archive + deps).
set_target_properties(hcomm_static PROPERTIES EXPORT_NAME hcomm_archive)
install(TARGETS hcomm hcomm_static EXPORT hcommTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(_pcdir "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
else()
  set(_pcdir "\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig")
endif()
install(CODE "
  file(READ \"${PROJECT_BINARY_DIR}/hcomm.pc\" _pc)
  string(REGEX REPLACE \"^prefix=[^\\n]*\" \"prefix=\${CMAKE_INSTALL_PREFIX}\" _pc \"\${_pc}\")
  string(MD5 _id \"\${CMAKE_INSTALL_PREFIX}\")
  file(WRITE \"${PROJECT_BINARY_DIR}/pkgconfig-install/\${_id}/hcomm.pc\" \"\${_pc}\")
  file(INSTALL DESTINATION \"${_pcdir}\" TYPE FILE
       FILES \"${PROJECT_BINARY_DIR}/pkgconfig-install/\${_id}/hcomm.pc\")
")

# The CMake package.
install(EXPORT hcommTargets NAMESPACE hcomm:: DESTINATION ${HCOMM_CMAKE_DIR})
export(EXPORT hcommTargets NAMESPACE hcomm:: FILE ${PROJECT_BINARY_DIR}/hcommTargets.cmake)
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
set(_man "")
foreach(dir tools bench)
  get_property(_targets DIRECTORY ${PROJECT_SOURCE_DIR}/${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(t ${_targets})
    get_target_property(_type ${t} TYPE)
    if(_type STREQUAL "EXECUTABLE")
      set_target_properties(${t} PROPERTIES INSTALL_RPATH "${_rpath}")
      if(dir STREQUAL "bench")
        string(REPLACE "_" "-" _dashed ${t})
        list(APPEND _renames "$<TARGET_FILE_NAME:${t}>" "hcomm-${_dashed}")
        list(APPEND _man "$<TARGET_FILE:${t}>" "hcomm-${_dashed}")
      else()
        list(APPEND _man "$<TARGET_FILE:${t}>" "${t}")
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

# nccl-tests' names (bench/CMakeLists.txt): links to the hcomm-* programs.
if(HCOMM_NCCL_TESTS_NAMES)
  set(_links "")
  set(_aliases ${HCOMM_NCCL_TESTS_ALIASES})
  while(_aliases)
    list(POP_FRONT _aliases _alias _tool)
    string(REPLACE "_" "-" _dashed ${_tool})
    list(APPEND _links ${_alias} hcomm-${_dashed})
  endwhile()
  install(CODE "
    set(_bindir \"${CMAKE_INSTALL_BINDIR}\")
    if(NOT IS_ABSOLUTE \"\${_bindir}\")
      set(_bindir \"\${CMAKE_INSTALL_PREFIX}/\${_bindir}\")
    endif()
    set(_links \"${_links}\")
    while(_links)
      list(POP_FRONT _links _alias _to)
      if(EXISTS \"\$ENV{DESTDIR}\${_bindir}/\${_to}\")
        message(STATUS \"Linking: \${_bindir}/\${_alias} -> \${_to}\")
        file(CREATE_LINK \"\${_to}\" \"\$ENV{DESTDIR}\${_bindir}/\${_alias}\" SYMBOLIC)
        list(APPEND CMAKE_INSTALL_MANIFEST_FILES \"\$ENV{DESTDIR}\${_bindir}/\${_alias}\")
      endif()
    endwhile()
  ")
endif()

# Man pages from each installed program's --help (cmake/HcommMan.cmake).
include(HcommMan)
hcomm_install_man(${_man} ${PROJECT_BINARY_DIR}/bin/hcomm_stats hcomm_stats)

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
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/CHANGELOG.md
              ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR})
# Debian's copyright file (machine-readable format), with the license text.
file(READ ${PROJECT_SOURCE_DIR}/LICENSE _license)
string(REGEX REPLACE "\n\n" "\n.\n" _license_deb "${_license}")
string(REGEX REPLACE "\n" "\n " _license_deb "${_license_deb}")
file(WRITE ${PROJECT_BINARY_DIR}/copyright
  "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
  "Upstream-Name: hcomm\n"
  "Source: the hcomm source tree (CMakeLists.txt, version ${PROJECT_VERSION})\n\n"
  "Files: *\nCopyright: the hcomm authors\nLicense: Apache-2.0\n\n"
  "License: Apache-2.0\n On Debian systems the full text is also in\n"
  " /usr/share/common-licenses/Apache-2.0.\n .\n${_license_deb}\n")
install(FILES ${PROJECT_BINARY_DIR}/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs
        FILES_MATCHING PATTERN "*.md" PATTERN "*.png" PATTERN "*.svg")
