# -*- Python -*-
import os
import shutil
import subprocess
import sys

import lit.formats
from lit.llvm import llvm_config

config.name = "mfsdp"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "unit"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.mfsdp_obj_root, "test")

config.environment["FILECHECK_OPTS"] = "--enable-var-scope"
# Prebuilt (uninstrumented) MLIR and our instrumented inline LLVM headers
# disagree on allocator poisoning.
# A sanitizer report must not look like our error status 1.
config.environment["ASAN_OPTIONS"] = "allow_user_poisoning=0:exitcode=86"
config.environment["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1:exitcode=87"
config.substitutions.append(("%mfsdp_src", config.mfsdp_src_root))
# %exit1 CMD: CMD must exit with status 1 (an error), not crash.
config.substitutions.append(
    ("%exit1", "%s %s 1" % (sys.executable, os.path.join(config.test_source_root, "expect_exit.py"))))
config.substitutions.append(("%mfsdp_bin", config.mfsdp_tools_dir))


# %torch_python: the `python3` on PATH, which scripts/setup.sh installs
# PyTorch for (lit's own interpreter may be another one); resolved to the
# interpreter itself, so wrappers such as pyenv's shims need no environment.
def torch_python():
    exe = shutil.which("python3")
    if exe:
        try:
            return subprocess.check_output(
                [exe, "-c", "import sys; print(sys.executable)"], text=True).strip()
        except (OSError, subprocess.CalledProcessError):
            pass
    return sys.executable


config.substitutions.append(("%torch_python", torch_python()))


# transformers 5 for that interpreter: tests that compare the HF config import
# and the exporter with the models it builds. Read from the package metadata,
# without importing it (seconds).
def transformers_major(python):
    try:
        out = subprocess.check_output(
            [python, "-c", "import importlib.metadata as m; print(m.version('transformers'))"],
            text=True, stderr=subprocess.DEVNULL).strip()
        return int(out.split(".")[0])
    except (OSError, subprocess.CalledProcessError, ValueError):
        return 0


if transformers_major(torch_python()) >= 5:
    config.available_features.add("transformers")
config.substitutions.append(("%examples", os.path.join(config.mfsdp_src_root, "examples")))

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
# nvcc: mfsdp-compile --cuda can build the plan's CUDA kernels.
if config.mfsdp_nvcc:
    config.available_features.add("nvcc")
llvm_config.add_tool_substitutions(
    ["mfsdp-opt", "mfsdp-translate", "mfsdp-graphgen", "mfsdp-sim", "mfsdp-compile",
     "mfsdp-check-kernels"],
    [config.mfsdp_tools_dir],
)
