"""`pip install .` for the Python package tapegrad (python/): builds the
extension tapegrad._C with the project's CMake (static libraries, so the
module stands alone) and installs it with python/tapegrad. Debian's pip and
setuptools: `pip install --no-build-isolation .` (nothing is fetched).
Options for CMake go in TAPEGRAD_CMAKE_ARGS. The CUDA backend is built only
where `nvidia-smi` finds a GPU or TAPEGRAD_CUDA=ON asks for it (its kernels
take minutes to compile); TAPEGRAD_CUDA=OFF never builds it."""
import os
import pathlib
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).parent.resolve()


def cuda_choice():
    """ON where TAPEGRAD_CUDA=ON or a GPU is present, else OFF."""
    asked = os.environ.get("TAPEGRAD_CUDA", "").upper()
    if asked in ("ON", "OFF"):
        return asked
    smi = shutil.which("nvidia-smi")
    if smi and subprocess.run([smi, "-L"], capture_output=True).returncode == 0:
        return "ON"
    return "OFF"


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
        args += ["-DTAPEGRAD_CUDA=" + cuda_choice()]
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
