"""`pip install .` for the Python package tapegrad (python/): builds the
extension tapegrad._C with the project's CMake (static libraries, so the
module stands alone) and installs it with python/tapegrad. Debian's pip and
setuptools: `pip install --no-build-isolation .` (nothing is fetched).
Options for CMake go in TAPEGRAD_CMAKE_ARGS (e.g. "-DTAPEGRAD_CUDA=OFF")."""
import os
import pathlib
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).parent.resolve()


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        target = pathlib.Path(self.get_ext_fullpath(ext.name)).resolve()
        build = pathlib.Path(self.build_temp).resolve() / "cmake"
        args = ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DTAPEGRAD_PYTHON=ON",
                "-DTAPEGRAD_BUILD_TESTS=OFF", "-DTAPEGRAD_BUILD_BENCH=OFF", "-DTAPEGRAD_BUILD_SAMPLES=OFF",
                f"-DPython3_EXECUTABLE={sys.executable}"]
        args += shlex.split(os.environ.get("TAPEGRAD_CMAKE_ARGS", ""))
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(build)] + args)
        subprocess.check_call(["cmake", "--build", str(build), "--target", "tapegrad_python",
                               "-j", str(os.cpu_count() or 2)])
        built = next((build / "python" / "tapegrad").glob("_C*" + pathlib.Path(target).suffix))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)


setup(
    name="tapegrad",
    version="0.1.0",
    description="Higher-order automatic differentiation on CPU and CUDA GPUs (C++ engine)",
    packages=["tapegrad"],
    package_dir={"": "python"},
    ext_modules=[CMakeExtension("tapegrad._C")],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    zip_safe=False,
)
