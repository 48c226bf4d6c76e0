"""Builds the switchml_torch package: python/switchml_torch plus its C++
extension _C, compiled by the project's CMake build (the switchml libraries
linked in statically) against the torch that runs this script.

    python3 -m pip install --no-build-isolation .              # Debian's torch, offline
    python3 -m pip install --no-build-isolation --prefix DIR .  # into a prefix

Needs what ./scripts/install-deps installs (cmake, a C++ compiler, torch, the
libraries). SWITCHML_BUILD_JOBS sets the build's parallelism (default: all CPUs).
"""
import glob
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(switchml VERSION ([0-9.]+)", f.read()).group(1)


class CMakeBuild(build_ext):
    """Configures and builds the extension's CMake target, then copies it
    where setuptools expects the extension."""

    def build_extension(self, ext):
        build = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        configure = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                     "-DSWITCHML_BUILD_TESTS=OFF", "-DSWITCHML_BUILD_APPS=OFF",
                     "-DSWITCHML_INSTALL=OFF", "-DSWITCHML_REQUIRE_TORCH=ON",
                     "-DPython3_EXECUTABLE=" + sys.executable]
        if shutil.which("ninja") and not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            configure += ["-G", "Ninja"]
        jobs = os.environ.get("SWITCHML_BUILD_JOBS", str(os.cpu_count() or 1))
        subprocess.check_call(configure)
        subprocess.check_call(["cmake", "--build", build, "--target", "switchml_torch_ext",
                               "--parallel", jobs])
        built = glob.glob(os.path.join(build, "python", "switchml_torch", "_C*.so"))
        if len(built) != 1:
            raise RuntimeError(f"the CMake build made {built!r}, not one switchml_torch/_C*.so")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)


os.makedirs(os.path.join(ROOT, "build-python"), exist_ok=True)
setup(
    name="switchml-torch",
    version=version(),
    description="switchml as a torch.distributed backend: all-reduce by in-network aggregation",
    long_description=open(os.path.join(ROOT, "README.md")).read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",  # tomllib
    install_requires=["torch>=1.13.0a0"],  # Debian's python3-torch is 1.13.0a0
    package_dir={"": "python"},
    packages=["switchml_torch"],
    ext_modules=[Extension("switchml_torch._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # Out of the way of the CMake build trees in build*/ at the top.
    options={"build": {"build_base": os.path.join(ROOT, "build-python")},
             "egg_info": {"egg_base": os.path.join(ROOT, "build-python")}},
    zip_safe=False,
)
