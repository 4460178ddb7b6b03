"""Builds the hcomm Python package: hcomm._hcomm (CPython binding of libhcomm)
and, when a supported torch imports, hcomm._torch_backend (the
torch.distributed backend "hcomm"). Metadata and entry points: pyproject.toml.

libhcomm is found, in this order, through
  HCOMM_BUILD_DIR   a CMake build directory of hcomm (lib/libhcomm.so; the
                    headers from the source tree its CMakeCache.txt names)
  HCOMM_PREFIX      an install prefix (include/hcomm.h, lib*/libhcomm.so)
  pkg-config hcomm  an installed hcomm.pc
and the extensions carry an rpath to that lib directory. None of them: the
library is built here with CMake from the source tree around python/ (or
HCOMM_SOURCE_DIR) and shipped inside the package (hcomm/libhcomm.so.0, found
through an $ORIGIN rpath), so `pip install ./python` needs no separate C
build. HCOMM_BUNDLE=1 builds it so even when an installed one is found.

HCOMM_PY_TORCH=0 skips the torch backend, =1 requires it (default: built
when torch, its headers and a supported version are there;
hcomm_autoload.py). HCOMM_PY_WERROR=1 adds -Werror. MAX_JOBS: the
parallelism of the C++ and CMake builds.
"""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext as _build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
os.chdir(HERE)  # sources are named relative to this directory
sys.path.insert(0, HERE)
import hcomm_autoload as _torch_range  # noqa: E402  (the supported torch range; imports nothing)

del sys.path[0]


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


def _installed():
    """(include_dir, lib_dir, how) of an installed or built libhcomm, or None."""
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
    return None


SOURCE_DIR = os.path.abspath(os.environ.get("HCOMM_SOURCE_DIR", os.path.dirname(HERE)))


def _version():
    """The project's version: project(hcomm VERSION x.y.z) of the source
    tree's CMakeLists.txt, the one place it is written (an sdist keeps it
    in PKG-INFO)."""
    import re
    try:
        with open(os.path.join(SOURCE_DIR, "CMakeLists.txt")) as f:
            m = re.search(r"project\(hcomm\s+VERSION\s+([0-9.]+)", f.read())
        if m:
            return m.group(1)
    except OSError:
        pass
    with open(os.path.join(HERE, "PKG-INFO")) as f:
        return re.search(r"^Version: (\S+)", f.read(), re.M).group(1)
BUNDLE_BUILD = os.path.join(HERE, "build", "libhcomm")
found = None if os.environ.get("HCOMM_BUNDLE") == "1" else _installed()
if found:
    INC, LIB, HOW = found
    BUNDLED = False
else:
    if not os.path.exists(os.path.join(SOURCE_DIR, "CMakeLists.txt")) or \
            not os.path.exists(os.path.join(SOURCE_DIR, "include", "hcomm.h")):
        sys.exit("hcomm setup: no installed libhcomm (HCOMM_BUILD_DIR, HCOMM_PREFIX, pkg-config hcomm) "
                 f"and no hcomm source tree at {SOURCE_DIR} to build one (HCOMM_SOURCE_DIR)")
    INC, LIB, HOW = os.path.join(SOURCE_DIR, "include"), os.path.join(BUNDLE_BUILD, "lib"), "bundled"
    BUNDLED = True
print(f"hcomm setup: libhcomm {HOW}: include {INC}, lib {LIB}")
SYSTEM_LIB = LIB in ("/usr/lib", "/usr/lib64", "/usr/lib/x86_64-linux-gnu")
RPATH = ["$ORIGIN"] if BUNDLED else [] if SYSTEM_LIB else [LIB]
werror = ["-Werror"] if os.environ.get("HCOMM_PY_WERROR") == "1" else []


def build_libhcomm():
    """libhcomm with CMake from SOURCE_DIR into BUNDLE_BUILD (incremental)."""
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    jobs = os.environ.get("MAX_JOBS") or str(os.cpu_count() or 1)
    cfg = ["cmake", "-S", SOURCE_DIR, "-B", BUNDLE_BUILD, *gen, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
           "-DHCOMM_BUILD_TESTS=OFF"]
    print("hcomm setup: building libhcomm:", " ".join(cfg))
    try:
        if not os.path.exists(os.path.join(BUNDLE_BUILD, "CMakeCache.txt")):
            subprocess.run(cfg, check=True)
        subprocess.run(["cmake", "--build", BUNDLE_BUILD, "--target", "hcomm", "-j", jobs], check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"hcomm setup: building libhcomm with CMake failed ({e}); install cmake and hcomm's "
                 "build dependencies (scripts/install-deps.sh), or point HCOMM_BUILD_DIR/HCOMM_PREFIX "
                 "at a built one")


def linked_to_hcomm(sources, extra_compile_args):
    """What both extensions pass to their Extension class (fresh lists each
    call: torch's CppExtension extends include_dirs in place)."""
    return dict(
        sources=sources,
        include_dirs=[INC, "src"],
        library_dirs=[LIB],
        runtime_library_dirs=RPATH,
        libraries=["hcomm"],
        extra_compile_args=extra_compile_args + werror,
        depends=[os.path.join(INC, "hcomm.h"), os.path.join("src", "hcomm_capi.h")] + (
            [] if BUNDLED else [os.path.join(LIB, "libhcomm.so")]),
    )


c_ext = Extension(
    "hcomm._hcomm",
    **linked_to_hcomm([os.path.join("src", "hcomm_module.c")],
                      ["-std=gnu11", "-Wall", "-Wextra", "-Wno-missing-field-initializers",
                       "-Wno-cast-function-type"]),
)
ext_modules = [c_ext]


class HcommBuildExt(_build_ext):
    """Builds libhcomm first when it is bundled (and copies it next to the
    extensions), then the extensions."""

    torch_builder = None

    def run(self):
        if BUNDLED:
            build_libhcomm()
        super().run()
        if BUNDLED:
            for dest in {os.path.join(self.build_lib, "hcomm")} | (
                    {os.path.join(HERE, "hcomm")} if self.inplace else set()):
                os.makedirs(dest, exist_ok=True)
                for so in glob.glob(os.path.join(LIB, "libhcomm.so.*")):
                    if not os.path.islink(so) or so.endswith(".so.0"):
                        shutil.copy2(os.path.realpath(so), os.path.join(dest, os.path.basename(so)))


def torch_extension():
    """The torch backend's Extension, or None (and why) when not built."""
    want = os.environ.get("HCOMM_PY_TORCH", "auto")
    if want == "0":
        return None, "HCOMM_PY_TORCH=0"
    try:
        import torch
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except Exception as e:  # torch missing or broken
        return None, f"torch does not import: {e!r}"
    why = _torch_range.check(torch.__version__)
    if why:
        return None, why
    HcommBuildExt.torch_builder = BuildExtension
    # one unit (extension.cpp includes the others: torch's headers dominate
    # the build time); every file of src/torch is a dependency
    src = [os.path.join("src", "torch", "extension.cpp")]
    ext = CppExtension(
        "hcomm._torch_backend",
        **linked_to_hcomm(src, ["-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers", "-fvisibility=hidden",
                                f"-DHCOMM_TORCH_MIN_MINOR={_torch_range.MIN[1]}",
                                f"-DHCOMM_TORCH_MAX_MINOR={_torch_range.MAX[1]}"]),
    )
    ext.depends += sorted(glob.glob(os.path.join("src", "torch", "*.[ch]pp")))
    return ext, None


ext, why_not = torch_extension()
if ext is not None:
    ext_modules.append(ext)
    print(f"hcomm setup: building the torch backend for torch {__import__('torch').__version__}")
elif os.environ.get("HCOMM_PY_TORCH") == "1":
    sys.exit(f"hcomm setup: HCOMM_PY_TORCH=1 but the torch backend cannot be built: {why_not}")
else:
    print(f"hcomm setup: building without the torch backend: {why_not}")


def _build_ext_class():
    if HcommBuildExt.torch_builder is None:
        return HcommBuildExt

    class WithTorch(HcommBuildExt, HcommBuildExt.torch_builder):
        """torch's BuildExtension (its compiler flags, ninja) for the torch
        extension, setuptools' for the rest."""

        def build_extensions(self):
            every = self.extensions
            try:
                self.extensions = [e for e in every if e is c_ext]
                _build_ext.build_extensions(self)
                self.extensions = [e for e in every if e is not c_ext]
                HcommBuildExt.torch_builder.build_extensions(self)
            finally:
                self.extensions = every

    return WithTorch.with_options(use_ninja=True)


setup(version=_version(), ext_modules=ext_modules, cmdclass={"build_ext": _build_ext_class()})
