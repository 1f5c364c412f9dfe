"""`pip install ./python` after `make build`: the package with the extension built in
the build tree (build/, or MFSDP_BUILD_DIR), which keeps pointing at that tree's
mfsdp-compile and runtime (docs/torch.md, "Installing the package")."""

import glob
import os
import shutil

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.abspath(os.environ.get("MFSDP_BUILD_DIR", os.path.join(HERE, "..", "build")))


class BuildPy(build_py):
    def run(self):
        super().run()
        built = os.path.join(BUILD, "python", "mfsdp")
        ext = glob.glob(os.path.join(built, "_C*.so"))
        if not ext:
            raise SystemExit(f"mfsdp: no extension mfsdp._C in {built}: run `make build` first, "
                             "or set MFSDP_BUILD_DIR to a build directory")
        out = os.path.join(self.build_lib, "mfsdp")
        for f in ext + [os.path.join(built, "_build_paths.py"),
                        os.path.join(built, "mfsdp_export.py")]:
            shutil.copy2(f, out)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPy}, distclass=BinaryDistribution)
