"""Builds the hcomm Python package: hcomm._hcomm (CPython binding of libhcomm)
and, when torch imports, hcomm._torch_backend (the torch.distributed process
group "hcomm").

libhcomm is found, in this order, through
  HCOMM_BUILD_DIR   a CMake build directory of hcomm (lib/libhcomm.so; the
                    headers from the source tree its CMakeCache.txt names)
  HCOMM_PREFIX      an install prefix (include/hcomm.h, lib*/libhcomm.so)
  pkg-config hcomm  an installed hcomm.pc
  ../build          the repository's default build directory, beside python/
The extensions carry an rpath to that lib directory.

HCOMM_PY_TORCH=0 skips the torch backend, =1 requires it (default: built
when torch and its headers are there). HCOMM_PY_WERROR=1 adds -Werror.
"""
import os
import subprocess
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
os.chdir(HERE)  # sources are named relative to this directory


def _cmake_source_dir(build_dir):
    cache = os.path.join(build_dir, "CMakeCache.txt")
    try:
        with open(cache) as f:
            for line in f:
                for var in ("hcomm_SOURCE_DIR:STATIC=", "CMAKE_HOME_DIRECTORY:INTERNAL="):
                    if line.startswith(var):
                        return line.strip().split("=", 1)[1]
    except OSError:
        pass
    return None


def _libdir_of(prefix):
    for d in ("lib", "lib64", os.path.join("lib", "x86_64-linux-gnu"),
              os.path.join("lib", "aarch64-linux-gnu")):
        p = os.path.join(prefix, d)
        if os.path.exists(os.path.join(p, "libhcomm.so")):
            return p
    return None


def find_hcomm():
    """(include_dir, lib_dir, how) of libhcomm, or exit with what to set."""
    bd = os.environ.get("HCOMM_BUILD_DIR")
    if bd:
        bd = os.path.abspath(bd)
        src = _cmake_source_dir(bd) or os.path.dirname(HERE)
        inc, lib = os.path.join(src, "include"), os.path.join(bd, "lib")
        if not os.path.exists(os.path.join(lib, "libhcomm.so")):
            sys.exit(f"hcomm setup: HCOMM_BUILD_DIR={bd} has no lib/libhcomm.so (build it first)")
        return inc, lib, "HCOMM_BUILD_DIR"
    prefix = os.environ.get("HCOMM_PREFIX")
    if prefix:
        lib = _libdir_of(prefix)
        if not lib:
            sys.exit(f"hcomm setup: HCOMM_PREFIX={prefix} has no lib*/libhcomm.so")
        return os.path.join(prefix, "include"), lib, "HCOMM_PREFIX"
    try:
        def var(v):
            return subprocess.run(["pkg-config", f"--variable={v}", "hcomm"], capture_output=True,
                                  text=True, check=True).stdout.strip()
        inc, lib = var("includedir"), var("libdir")
        if os.path.exists(os.path.join(inc, "hcomm.h")) and \
                os.path.exists(os.path.join(lib, "libhcomm.so")):
            return inc, lib, "pkg-config"
    except (OSError, subprocess.CalledProcessError):
        pass
    repo = os.path.dirname(HERE)
    lib = os.path.join(repo, "build", "lib")
    if os.path.exists(os.path.join(repo, "include", "hcomm.h")) and \
            os.path.exists(os.path.join(lib, "libhcomm.so")):
        return os.path.join(repo, "include"), lib, "../build"
    sys.exit("hcomm setup: libhcomm not found: set HCOMM_BUILD_DIR=<cmake build dir> or "
             "HCOMM_PREFIX=<install prefix>, or install hcomm.pc for pkg-config")


INC, LIB, HOW = find_hcomm()
print(f"hcomm setup: libhcomm from {HOW}: include {INC}, lib {LIB}")
SYSTEM_LIB = LIB in ("/usr/lib", "/usr/lib64", "/usr/lib/x86_64-linux-gnu")
werror = ["-Werror"] if os.environ.get("HCOMM_PY_WERROR") == "1" else []
src_dir = os.path.join("src")


def linked_to_hcomm(source, extra_compile_args):
    """What both extensions pass to their Extension class: the source in
    src/, libhcomm's headers and library (fresh lists each call: torch's
    CppExtension extends include_dirs in place)."""
    return dict(
        sources=[os.path.join(src_dir, source)],
        include_dirs=[INC, src_dir],
        library_dirs=[LIB],
        runtime_library_dirs=[] if SYSTEM_LIB else [LIB],
        libraries=["hcomm"],
        extra_compile_args=extra_compile_args + werror,
        depends=[os.path.join(INC, "hcomm.h"), os.path.join(src_dir, "hcomm_capi.h"),
                 os.path.join(LIB, "libhcomm.so")],
    )


c_ext = Extension(
    "hcomm._hcomm",
    **linked_to_hcomm("hcomm_module.c", ["-std=gnu11", "-Wall", "-Wextra",
                                         "-Wno-missing-field-initializers",
                                         "-Wno-cast-function-type"]),
)
ext_modules = [c_ext]
cmdclass = {}

want_torch = os.environ.get("HCOMM_PY_TORCH", "auto")
if want_torch != "0":
    try:
        from torch.utils.cpp_extension import BuildExtension, CppExtension, include_paths
        have_torch = True
        pg = "torch/csrc/distributed/c10d/ProcessGroup.hpp"
        if not any(os.path.exists(os.path.join(d, pg)) for d in include_paths()):
            have_torch = False
            why = f"no {pg} (Debian: apt-get install libtorch-dev)"
    except Exception as e:  # torch missing or broken
        have_torch = False
        why = repr(e)
    if have_torch:
        ext_modules.append(CppExtension(
            "hcomm._torch_backend",
            **linked_to_hcomm("process_group_hcomm.cpp", ["-Wall", "-Wextra", "-Wno-unused-parameter",
                                                          "-Wno-missing-field-initializers"]),
        ))
        from setuptools.command.build_ext import build_ext as _plain_build_ext

        class HcommBuildExt(BuildExtension):
            """The C extension with the plain C compiler (torch's builder would compile
            it as C++), the torch one with torch's."""

            def build_extensions(self):
                every = self.extensions
                try:
                    self.extensions = [e for e in every if e is c_ext]
                    _plain_build_ext.build_extensions(self)
                    self.extensions = [e for e in every if e is not c_ext]
                    BuildExtension.build_extensions(self)
                finally:
                    self.extensions = every

        cmdclass["build_ext"] = HcommBuildExt.with_options(use_ninja=True)
    elif want_torch == "1":
        sys.exit(f"hcomm setup: HCOMM_PY_TORCH=1 but torch.utils.cpp_extension fails: {why}")
    else:
        print(f"hcomm setup: torch not usable ({why}): building without the torch backend")

setup(
    name="hcomm",
    version="0.1.0",
    description="Python binding and PyTorch process group of the hcomm communication library",
    packages=["hcomm"],
    ext_modules=ext_modules,
    cmdclass=cmdclass,
    python_requires=">=3.8",
    zip_safe=False,
)
