#!/usr/bin/env bash
# Installs a build tree into a scratch prefix and uses it the way a user
# does (docs/install.md). One case per ctest test:
#   test_install.sh BUILD SRC CASE
#     cmake      a minimal CMake project: find_package(hcomm) + hcomm::hcomm
#                and hcomm::hcomm_static; the version file (SameMajorVersion)
#     pkgconfig  cc $(pkg-config --cflags --libs hcomm)
#     static     cc $(pkg-config --cflags hcomm) $(pkg-config --variable=static_libs hcomm)
#     tools      the installed tools run from the prefix (RUNPATH, hcomm- names)
#     deb        cpack -G DEB: the package's metadata and contents (dpkg-deb),
#                then dpkg -x into a scratch root and build against that
#     buildtree  nothing installed: the CMake project with -Dhcomm_DIR=BUILD
#                (hcommTargets.cmake exported there), and both pkg-config
#                recipes with PKG_CONFIG_PATH=BUILD (hcomm-uninstalled.pc:
#                the build's lib/, the source's include/)
# Every program built here runs without LD_LIBRARY_PATH (1 rank: hcomm_init,
# an allreduce, hcomm_finalize; the tools under the installed hcommrun).
# Environment: CC (the build's compiler), CMAKE, CPACK, HCOMM_TEST_CFLAGS
# (the build's sanitizer flags, which consumers of its library need too).
set -euo pipefail
build=$(realpath "$1") src=$(realpath "$2") case=$3
: "${CC:=cc}" "${CMAKE:=cmake}" "${CPACK:=cpack}" "${HCOMM_TEST_CFLAGS:=}"
read -ra cflags <<<"$HCOMM_TEST_CFLAGS"
unset LD_LIBRARY_PATH
export HCOMM_TOPO_CACHE=none HCOMM_TIMEOUT=30
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hcomm-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
consumer=$src/tests/install/consumer
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build/CMakeCache.txt") # lib, lib/x86_64-linux-gnu

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }
step() { echo "--- $*"; }
[[ $libdir != /* ]] || skip "CMAKE_INSTALL_LIBDIR is absolute ($libdir): no relocatable prefix"
# run PROG...: runs it and checks it reports a working allreduce
run() {
    local out rc=0
    out=$("$@" 2>&1) || rc=$?
    ((rc == 0)) || { echo "$out" >&2; fail "$1 exited $rc"; }
    grep -q "rank 0 of 1, allreduce ok" <<<"$out" || { echo "$out" >&2; fail "$1: no allreduce"; }
    echo "  $1: ok"
}
# needs_no_libhcomm PROG: the static link left no libhcomm.so behind
needs_no_libhcomm() {
    ! readelf -d "$1" | grep -q 'NEEDED.*libhcomm' || fail "$1 needs libhcomm.so"
}
install_prefix() { # PREFIX
    "$CMAKE" --install "$build" --prefix "$1" >"$tmp/install.log" 2>&1 ||
        { cat "$tmp/install.log" >&2; fail "cmake --install"; }
}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# cmake_consumer PREFIX [-Dhcomm_DIR=DIR]: configures, builds and runs
# tests/install/consumer
cmake_consumer() {
    local b=$tmp/consumer
    rm -rf "$b"
    if ! "$CMAKE" -S "$consumer" -B "$b" "${generator[@]}" -DCMAKE_PREFIX_PATH="$1" ${2:+"$2"} \
        -DCMAKE_C_COMPILER="$CC" -DCMAKE_C_FLAGS="$HCOMM_TEST_CFLAGS" \
        -DCMAKE_EXE_LINKER_FLAGS="$HCOMM_TEST_CFLAGS" >"$tmp/consumer.log" 2>&1 ||
        ! "$CMAKE" --build "$b" >>"$tmp/consumer.log" 2>&1; then
        cat "$tmp/consumer.log" >&2
        fail "the CMake consumer does not build"
    fi
    local want="hcomm_DIR:PATH=$1/" dir=${2:-}
    [[ -z $dir ]] || want="hcomm_DIR:[A-Z]+=${dir#-Dhcomm_DIR=}\$"
    grep -Eq "$want" "$b/CMakeCache.txt" ||
        fail "find_package found another hcomm: $(grep hcomm_DIR "$b/CMakeCache.txt")"
    run "$b/app"
    run "$b/app_static"
    needs_no_libhcomm "$b/app_static"
}
# pc_shared PCDIR: cc $(pkg-config --cflags --libs hcomm)
pc_shared() {
    export PKG_CONFIG_PATH=$1
    [[ $(pkg-config --modversion hcomm) == "$version" ]] || fail "pkg-config --modversion"
    # shellcheck disable=SC2046
    "$CC" "${cflags[@]}" "$consumer/main.c" $(pkg-config --cflags --libs hcomm) \
        -Wl,-rpath,"$(pkg-config --variable=libdir hcomm)" -o "$tmp/app_pc" ||
        fail "cc \$(pkg-config --cflags --libs hcomm)"
    run "$tmp/app_pc"
    readelf -d "$tmp/app_pc" | grep -q 'NEEDED.*libhcomm.so.0' || fail "app_pc does not use libhcomm.so.0"
}
# pc_static PCDIR: the static recipe of hcomm.pc
pc_static() {
    export PKG_CONFIG_PATH=$1
    echo "  static_libs: $(pkg-config --variable=static_libs hcomm)"
    # shellcheck disable=SC2046
    "$CC" "${cflags[@]}" "$consumer/main.c" $(pkg-config --cflags hcomm) \
        $(pkg-config --variable=static_libs hcomm) -o "$tmp/app_pc_static" ||
        fail "the static recipe does not link"
    run "$tmp/app_pc_static"
    needs_no_libhcomm "$tmp/app_pc_static"
}

case $case in
buildtree)
    for f in hcommConfig.cmake hcommTargets.cmake hcomm-uninstalled.pc lib/libhcomm.a; do
        [[ -e $build/$f ]] || fail "the build tree has no $f"
    done
    step "find_package(hcomm) with -Dhcomm_DIR=$build"
    cmake_consumer "$tmp/nothing-here" "-Dhcomm_DIR=$build"
    step "pkg-config with PKG_CONFIG_PATH=$build (hcomm-uninstalled.pc)"
    export PKG_CONFIG_PATH=$build
    inc=$(pkg-config --variable=includedir hcomm)
    [[ -f $inc/hcomm.h ]] || fail "pkg-config's includedir $inc has no hcomm.h"
    [[ $(pkg-config --variable=libdir hcomm) == "$build/lib" ]] || fail "pkg-config's libdir is not $build/lib"
    pc_shared "$build"
    pc_static "$build"
    ;;
cmake)
    p=$tmp/prefix
    install_prefix "$p"
    step "find_package(hcomm) from $p"
    cmake_consumer "$p"
    step "hcommConfigVersion.cmake: SameMajorVersion"
    cat >"$tmp/version.cmake" <<'EOF'
string(REPLACE "." ";" _v "${PACKAGE_FIND_VERSION}")
list(GET _v 0 PACKAGE_FIND_VERSION_MAJOR)
set(CMAKE_SIZEOF_VOID_P 8)
include(${V})
message("${PACKAGE_VERSION_COMPATIBLE}")
EOF
    for want in "0.1:TRUE" "0.0.1:TRUE" "$version:TRUE" "0.2:FALSE" "1.0:FALSE"; do
        v=${want%:*} expect=${want#*:}
        got=$("$CMAKE" -DPACKAGE_FIND_VERSION="$v" -DV="$p/$libdir/cmake/hcomm/hcommConfigVersion.cmake" \
            -P "$tmp/version.cmake" 2>&1) || fail "$got"
        [[ $got == "$expect" ]] || fail "find_package(hcomm $v): compatible=$got, want $expect"
    done
    echo "  0.1 0.0.1 $version: compatible; 0.2 1.0: not"
    ;;
pkgconfig | static)
    p=$tmp/prefix
    install_prefix "$p"
    pcdir=$(dirname "$(find "$p" -name hcomm.pc)")
    step "pkg-config from $pcdir"
    [[ $(pkg-config --variable=prefix "$pcdir/hcomm.pc") == "$p" ]] || fail "hcomm.pc does not name $p"
    if [[ $case == pkgconfig ]]; then pc_shared "$pcdir"; else pc_static "$pcdir"; fi
    ;;
tools)
    p=$tmp/prefix
    install_prefix "$p"
    step "tools in $p/bin"
    for t in hcommrun hcomm_info hcomm_stats hcomm-hugepages hcomm-pingpong hcomm-allreduce-bw; do
        [[ -x $p/bin/$t ]] || fail "bin/$t is not installed"
    done
    for t in pingpong allreduce_bw mixed_load; do
        [[ ! -e $p/bin/$t ]] || fail "bin/$t is installed under its build-tree name"
    done
    for t in "$p"/bin/hcomm-*; do
        [[ $(head -c 4 "$t") == $'\x7fELF' ]] || continue
        # shellcheck disable=SC2016
        readelf -d "$t" | grep -q 'R.*PATH.*\$ORIGIN' || fail "$t has no \$ORIGIN RUNPATH"
    done
    # (the install tests share a RESOURCE_LOCK: each install rewrites it)
    grep -qx "$p/bin/hcomm-allreduce-bw" "$build/install_manifest.txt" ||
        fail "install_manifest.txt misses bin/hcomm-allreduce-bw"
    ! grep -qx "$p/bin/allreduce_bw" "$build/install_manifest.txt" ||
        fail "install_manifest.txt lists bin/allreduce_bw"
    "$p/bin/hcomm_info" >"$tmp/info.txt" 2>&1 || { cat "$tmp/info.txt" >&2; fail "hcomm_info"; }
    grep -q "^hcomm $version" "$tmp/info.txt" || fail "hcomm_info: no version line"
    echo "  hcomm_info: $(grep -m1 "^hcomm $version" "$tmp/info.txt")"
    "$p/bin/hcommrun" -n 2 --timeout 20 "$p/bin/hcomm-allreduce-bw" -b 8 -e 64K -n 5 -w 2 \
        >"$tmp/bw.txt" 2>&1 || { cat "$tmp/bw.txt" >&2; fail "hcommrun -n 2 hcomm-allreduce-bw"; }
    grep -q "65536" "$tmp/bw.txt" || { cat "$tmp/bw.txt" >&2; fail "hcomm-allreduce-bw: no 64K line"; }
    echo "  hcommrun -n 2 hcomm-allreduce-bw: ok"
    "$p/bin/hcomm_stats" --help >/dev/null || fail "hcomm_stats --help"
    [[ -f $p/share/doc/hcomm/README.md && -f $p/share/doc/hcomm/docs/install.md ]] ||
        fail "docs are not in share/doc/hcomm"
    ;;
deb)
    command -v dpkg-deb >/dev/null || skip "no dpkg-deb"
    step "cpack -G DEB"
    # cpack stages and writes under $tmp/pkg: the build tree gets no package.
    (cd "$tmp" && "$CPACK" -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/pkg") \
        >"$tmp/cpack.log" 2>&1 || { cat "$tmp/cpack.log" >&2; fail "cpack -G DEB"; }
    deb=$(echo "$tmp"/pkg/hcomm_*.deb)
    [[ -f $deb ]] || { cat "$tmp/cpack.log" >&2; fail "no hcomm_*.deb"; }
    echo "  $(basename "$deb"): $(du -k "$deb" | cut -f1) kB"
    dpkg-deb -f "$deb" Package Version Architecture Depends | sed 's/^/  /'
    depends=$(dpkg-deb -f "$deb" Depends)
    for d in libc6 libhwloc15 libnuma1 python3; do
        grep -q "\b$d\b" <<<"$depends" || fail "Depends lacks $d: $depends"
    done
    if readelf -d "$build/lib/libhcomm.so" | grep -q 'NEEDED.*libibverbs'; then
        grep -q "\blibibverbs1\b" <<<"$depends" || fail "Depends lacks libibverbs1: $depends"
    fi
    # Suggests: a -dev package for every library the static recipe names
    suggests=$(dpkg-deb -f "$deb" Suggests)
    echo "  Suggests: $suggests"
    static=$(sed -n 's/^static_libs=//p' "$build/hcomm.pc")
    for pair in "-lhwloc libhwloc-dev" "-lnuma libnuma-dev" "-lcrypto libssl-dev" \
        "-libverbs libibverbs-dev" "-lmlx5 libibverbs-dev" "-lrte_eal libdpdk-dev" "-lpmix libpmix-dev"; do
        flag=${pair% *} pkg=${pair#* }
        if grep -q -- "$flag\b" <<<"$static"; then
            grep -q "\b$pkg\b" <<<"$suggests" || fail "static_libs has $flag but Suggests lacks $pkg: $suggests"
        fi
    done
    dpkg-deb -c "$deb" | awk '{print $6}' >"$tmp/contents"
    l=./usr/$libdir
    for f in $l/libhcomm.so.0 $l/libhcomm.so $l/libhcomm.a ./usr/include/hcomm.h \
        $l/cmake/hcomm/hcommConfig.cmake $l/cmake/hcomm/hcommConfigVersion.cmake \
        $l/cmake/hcomm/hcommTargets.cmake $l/pkgconfig/hcomm.pc \
        ./usr/bin/hcommrun ./usr/bin/hcomm_info ./usr/bin/hcomm_stats ./usr/bin/hcomm-allreduce-bw \
        ./usr/bin/hcomm-pingpong ./usr/share/doc/hcomm/README.md ./usr/share/doc/hcomm/copyright \
        ./usr/share/doc/hcomm/LICENSE ./usr/share/doc/hcomm/CHANGELOG.md \
        ./usr/share/man/man1/hcommrun.1 ./usr/share/man/man1/hcomm_info.1 \
        ./usr/share/man/man1/hcomm_stats.1 ./usr/share/man/man1/hcomm-allreduce-bw.1 \
        ./usr/share/man/man1/hcomm-pingpong.1 ./usr/share/man/man1/hcomm-mixed-load.1; do
        grep -qx "$f" "$tmp/contents" || fail "the package lacks $f"
    done
    ! grep -qx "./usr/bin/pingpong" "$tmp/contents" || fail "the package has ./usr/bin/pingpong"
    for a in all_reduce_perf all_gather_perf reduce_scatter_perf broadcast_perf reduce_perf \
        alltoall_perf gather_perf scatter_perf sendrecv_perf; do
        grep -qx "./usr/bin/$a" "$tmp/contents" || fail "the package lacks the nccl-tests name $a"
    done
    echo "  dpkg-deb -c: $(wc -l <"$tmp/contents") entries, library, headers, cmake package, pc file, tools, docs"
    step "dpkg -x into $tmp/root"
    dpkg -x "$deb" "$tmp/root"
    "$tmp/root/usr/bin/hcomm_info" >/dev/null 2>&1 || fail "the packaged hcomm_info does not run"
    # every installed program has its page, made of its --help
    for t in "$tmp"/root/usr/bin/*; do
        n=$(basename "$t")
        [[ $n == hcomm-hugepages || -L $t ]] && continue # the nccl-tests names are links
        m=$tmp/root/usr/share/man/man1/$n.1
        [[ -f $m ]] || fail "no man page for $n"
        head -1 "$m" | grep -q "^\.TH \"$n\" 1 .*\"hcomm $version\"" || fail "$n.1: $(head -1 "$m")"
        grep -q "usage" "$m" || fail "$n.1 does not hold its --help"
    done
    if command -v groff >/dev/null; then
        groff -man -Tutf8 -ww "$tmp/root/usr/share/man/man1/hcommrun.1" 2>"$tmp/groff.err" >/dev/null
        [[ ! -s $tmp/groff.err ]] || fail "groff warns on hcommrun.1: $(head -3 "$tmp/groff.err")"
    fi
    grep -q "^License: Apache-2.0" "$tmp/root/usr/share/doc/hcomm/copyright" || fail "copyright names no license"
    "$tmp/root/usr/bin/hcommrun" -n 1 --timeout 20 "$tmp/root/usr/bin/hcomm-allreduce-bw" -b 8 -e 1K -n 2 -w 1 \
        >"$tmp/bw.txt" 2>&1 || { cat "$tmp/bw.txt" >&2; fail "the packaged hcomm-allreduce-bw"; }
    cmake_consumer "$tmp/root/usr"
    # hcomm.pc names /usr: the unpacked root is a sysroot to pkg-config.
    export PKG_CONFIG_SYSROOT_DIR=$tmp/root
    [[ $(pkg-config --variable=prefix "$tmp/root/usr/$libdir/pkgconfig/hcomm.pc") == "$tmp/root/usr" ]] ||
        fail "the packaged hcomm.pc does not name /usr"
    pc_shared "$tmp/root/usr/$libdir/pkgconfig"
    pc_static "$tmp/root/usr/$libdir/pkgconfig"
    ;;
*)
    fail "unknown case $case"
    ;;
esac
echo "PASS: install $case"
