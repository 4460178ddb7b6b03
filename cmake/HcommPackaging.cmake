# The Debian package (docs/install.md):
#   cmake -S . -B build -G Ninja && cmake --build build
#   cd build && cpack -G DEB            # -> hcomm_<version>-1_<arch>.deb
# One package, installed under /usr: library, headers, CMake package, pc file,
# tools and docs. Its library dependencies (libhwloc15, libnuma1,
# libibverbs1 ...) come from dpkg-shlibdeps on the packaged binaries.
set(HCOMM_PACKAGE_MAINTAINER "hcomm maintainers <hcomm@localhost>" CACHE STRING
  "Maintainer field of the Debian package (Name <email>)")

set(CPACK_PACKAGE_NAME hcomm)
set(CPACK_PACKAGE_VENDOR hcomm)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGE_CONTACT "${HCOMM_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "communication library for distributed training and HPC")
set(CPACK_PACKAGE_DESCRIPTION
  "hcomm moves tagged point-to-point messages and runs the collectives \
(allreduce, broadcast, allgather, reduce-scatter, alltoall, ...) between the \
ranks of a job: shared hugepage memory inside a node, RDMA verbs or TCP \
between nodes. License: Apache-2.0. The package holds the shared and static libraries, the header, \
the CMake package (find_package(hcomm)) and pkg-config file, the hcommrun \
launcher, hcomm_info, hcomm_stats and the hcomm-* benchmarks.")
set(CPACK_GENERATOR DEB)
# Install with CMAKE_INSTALL_PREFIX=/usr into a DESTDIR, so that hcomm.pc
# names /usr, not the staging directory.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
# hcomm_stats is Python (standard library only); linking the static archive
# needs the libraries' development files (-lhwloc ...).
set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3")
# Suggests: what the static recipe (hcomm.pc's static_libs, the libraries
# hcomm_obj links) needs to link, one -dev package per dependency built in:
# hwloc, numa, crypto (libssl-dev), verbs and mlx5 (libibverbs-dev ships
# libmlx5.so too), DPDK, PMIx. docs/install.md lists the same.
set(_suggests "pkg-config, libhwloc-dev, libnuma-dev, libssl-dev")
if(HCOMM_HAVE_VERBS OR HCOMM_HAVE_MLX5)
  string(APPEND _suggests ", libibverbs-dev")
endif()
if(HCOMM_HAVE_DPDK)
  string(APPEND _suggests ", libdpdk-dev")
endif()
if(TARGET PkgConfig::PMIX)
  string(APPEND _suggests ", libpmix-dev")
endif()
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "${_suggests}")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_SOURCE_GENERATOR TGZ)
set(CPACK_SOURCE_IGNORE_FILES "/\\\\.git/" "/build[^/]*/" "/\\\\.gl/" "/\\\\.whl/" "\\\\.o$" "\\\\.swp$")

include(CPack)
