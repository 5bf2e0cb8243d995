"""`make gpu-test` runs in a GPU image with only torch, NumPy, safetensors, tiktoken, PyYAML,
tqdm and pytest: the root conftest, the GPU tests and bench/gpu_check.py must import there,
so none of them may import the data layer or its dependencies at import time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# absent from the GPU image: importing any of them there raises ImportError
ABSENT = ("zstandard", "datasets", "snakemake", "dvc", "lm_eval")
MODULES = {
    "root_conftest": TESTS / "conftest.py",
    "gpu_tests": TESTS / "gpu" / "test_cuda.py",
    "gpu_check": TESTS.parent / "bench" / "gpu_check.py",
}


def test_the_gpu_tests_import_without_the_data_layer() -> None:
    code = "\n".join(
        [
            "import sys, importlib.util",
            *(f"sys.modules[{name!r}] = None" for name in ABSENT),
            f"for name, path in { ({k: str(v) for k, v in MODULES.items()})!r}.items():",
            "    spec = importlib.util.spec_from_file_location(name, path)",
            "    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)",
            "bad = sorted(m for m in sys.modules if m.startswith('leviathan.data'))",
            "assert not bad, bad",
            "print('imported', len(sys.modules))",
        ]
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "imported" in done.stdout
