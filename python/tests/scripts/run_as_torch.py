"""Runs a script written for PyTorch with `torch` meaning tessera, as `import tessera as torch`
would: python run_as_torch.py SCRIPT [ARGS...]."""
import importlib
import runpy
import sys

import tessera

sys.modules["torch"] = tessera
for name in ("nn", "nn.functional", "nn.init", "nn.utils", "optim", "optim.lr_scheduler", "utils",
             "utils.data", "utils.checkpoint", "autograd", "amp", "profiler"):
    try:
        sys.modules["torch." + name] = importlib.import_module("tessera." + name)
    except ImportError:
        pass  # the script fails at the missing name, as a user would see it

script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
