#!/usr/bin/env python3
"""Checks that the include graph follows the layer order of
docs/ARCHITECTURE.md ("Layers"): a file may include only headers of its own
layer or of a layer below it. Run from anywhere; exits 1 listing each
include that goes up (or a source file outside every layer)."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Lowest first. A path belongs to the first layer with a matching prefix.
LAYERS = [
    # The few dependency-free pieces both the CUDA runtime and the tensor
    # layer need: errors, the environment switches, dtypes, devices and the
    # Allocator interface.
    ("core", ["include/tapegrad/tensor/error.h", "tensor/error.cpp", "tensor/env.h",
              "include/tapegrad/tensor/scalar_type.h", "include/tapegrad/tensor/dtypes.def",
              "tensor/scalar_type.cpp",
              "include/tapegrad/tensor/device.h", "include/tapegrad/tensor/allocator.h"]),
    # Devices, streams, events, caching allocators, the capture state, the
    # launch encoder's byte-range side and the library handles (as c10/cuda
    # under ATen): no Tensor.
    ("cuda-runtime", ["cuda/runtime/", "include/tapegrad/cuda/device.h", "include/tapegrad/cuda/stream.h",
                      "include/tapegrad/cuda/allocator.h", "include/tapegrad/cuda/capture.h"]),
    ("tensor", ["tensor/", "include/tapegrad/tensor/", "include/tapegrad/cuda/static_tensor.h"]),
    ("cuda-kernels", ["cuda/kernels/", "cuda/launch.h"]),
    ("autograd", ["autograd/", "include/tapegrad/autograd/"]),
    ("nn", ["nn/", "include/tapegrad/nn/"]),
    ("graphs", ["graphs/", "include/tapegrad/cuda/graph.h", "include/tapegrad/cuda/graphed.h"]),
    ("optim", ["optim/", "include/tapegrad/optim/"]),
    ("ode", ["ode/", "include/tapegrad/ode/"]),
    ("top", ["distributed/", "include/tapegrad/distributed/", "capi/", "include/tapegrad_c.h",
             "include/tapegrad/tapegrad.h", "python/"]),
]
CHECKED = [name for name, _ in LAYERS]
SUFFIXES = {".h", ".cpp", ".cu", ".cuh", ".def"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def layer_of(rel):
    for i, (_, prefixes) in enumerate(LAYERS):
        if any(rel == p or rel.startswith(p) for p in prefixes):
            return i
    return None


def resolve(src, quote, name):
    """The repository path an include names, or None (system and third-party headers)."""
    if name.startswith("tapegrad/") or name == "tapegrad_c.h":
        return "include/" + name
    if quote == '"':
        if (ROOT / name).is_file():
            return name
        local = (src.parent / name)
        if local.is_file():
            return str(local.resolve().relative_to(ROOT))
    return None


def main():
    bad = []
    dirs = ["tensor", "cuda", "autograd", "nn", "graphs", "optim", "distributed", "capi", "python", "include"]
    for d in dirs:
        for f in sorted((ROOT / d).rglob("*")):
            if f.suffix not in SUFFIXES or not f.is_file():
                continue
            rel = str(f.relative_to(ROOT))
            mine = layer_of(rel)
            if mine is None:
                bad.append(f"{rel}: in no layer (add it to scripts/check_layers.py and docs/ARCHITECTURE.md)")
                continue
            for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = resolve(f, m.group(1), m.group(2))
                if target is None:
                    continue
                theirs = layer_of(target)
                if theirs is not None and theirs > mine:
                    bad.append(f"{rel}:{n}: {LAYERS[mine][0]} includes {target} ({LAYERS[theirs][0]}, a layer above)")
    if bad:
        print("layer order broken (docs/ARCHITECTURE.md, \"Layers\"):")
        print("\n".join("  " + b for b in bad))
        return 1
    print(f"layers ok: {' < '.join(CHECKED)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
