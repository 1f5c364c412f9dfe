"""Where the package finds the compiler (mfsdp-compile), the exporter and the runtime.

In a build tree, `_build_paths.py` (written by CMake next to this file) names them;
an installed package (`pip install ./python`) carries a copy of the same file. The
variable MFSDP_BUILD_DIR, when set, names another build tree instead.
"""

import os
import shutil

from . import Error


def _build_paths():
    build = os.environ.get("MFSDP_BUILD_DIR")
    if build:
        return os.path.join(build, "bin"), os.path.join(build, "lib")
    try:
        from . import _build_paths as bp
    except ImportError:
        return None, None
    return bp.BIN_DIR, bp.LIB_DIR


def tool(name):
    """The path of one of mfsdp's programs (e.g. 'mfsdp-compile')."""
    bin_dir, _ = _build_paths()
    candidates = []
    if bin_dir:
        candidates.append(os.path.join(bin_dir, name))
    found = shutil.which(name)
    if found:
        candidates.append(found)
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise Error(f"cannot find {name}: looked in {bin_dir or '(no build tree)'} and on PATH; "
                "build mfsdp (make build) or set MFSDP_BUILD_DIR to its build directory")
