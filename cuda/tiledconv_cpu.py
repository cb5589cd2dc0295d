"""Runs the CUDA kernels on the CPU, for checking them where there is no GPU.

``conv2d_emulated(image, mask, variant)`` takes the same arguments as
``tiledconv.conv2d`` (CPU tensors) and executes the very kernel source of
``cuda/kernels`` with the launch plan ``tiledconv.plan_launches`` makes, in a
small emulator (``cpu_emulation/``) compiled with the host C++ compiler: each
block's threads are fibers that meet at ``__syncthreads()``, and
``__shared__``/``__constant__`` become ordinary arrays. It checks indexing,
halo and boundary logic, the tile sizes the loader assumes, the channel
groups of the constant-memory variants and barrier placement; it says
nothing about speed, warps or the GPU memory model.

Input and output live inside larger buffers whose guard cells hold NaN (input)
and a sentinel (output): a kernel that reads outside the image poisons its
result with NaN, and one that writes outside it is reported.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

import tiledconv

EMULATION_DIR = Path(__file__).resolve().parent / "cpu_emulation"
OUTPUT_SENTINEL = 1.25e30
_library = None


def host_compiler() -> str | None:
    """Path of the C++ compiler ($CXX, else g++), or None when there is none."""
    return shutil.which(os.environ.get("CXX", "g++"))


def build_emulator() -> Path:
    """Compiles the emulator library once per source version; returns its path.

    The library goes to the temp folder under a name that hashes every source,
    so edits rebuild and concurrent builders do not clash.
    """
    cxx = host_compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler found (set CXX or install g++)")
    sources = [EMULATION_DIR / "emulator.cpp", EMULATION_DIR / "cuda_emulation.h",
               *sorted(tiledconv.KERNEL_DIR.glob("*.cu*"))]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:16]
    target = Path(tempfile.gettempdir()) / f"dsgd-conv-emulator-{digest}.so"
    if not target.exists():
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        cmd = [cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-Wall", "-Wno-unknown-pragmas",
               "-o", str(partial), str(EMULATION_DIR / "emulator.cpp")]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"building the kernel emulator failed:\n{result.stderr}")
        os.replace(partial, target)
    return target


def _load():
    global _library
    if _library is None:
        lib = ctypes.CDLL(str(build_emulator()))
        uint3 = ctypes.c_uint * 3
        lib.emu_launch.argtypes = [ctypes.c_char_p, ctypes.c_int, uint3, uint3,
                                   ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                   *[ctypes.c_int] * 6]
        lib.emu_set_constant_masks.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.emu_last_error.restype = ctypes.c_char_p
        _library = lib
    return _library


def _guarded(values: torch.Tensor, guard: int, fill: float, shift: int) -> torch.Tensor:
    buf = torch.full((values.numel() + 2 * guard + shift,), fill, dtype=torch.float32)
    buf[guard + shift:guard + shift + values.numel()] = values.reshape(-1)
    return buf


def conv2d_emulated(image: torch.Tensor, mask: torch.Tensor,
                    variant: str = tiledconv.DEFAULT_VARIANT, *,
                    misalign: bool = False) -> torch.Tensor:
    """tiledconv.conv2d, executed on the CPU by the emulator.

    misalign=True shifts the input and output pointers by one float, so the
    kernels that vectorise must take their scalar path.
    """
    shape = tiledconv.check_inputs(image, mask, require_cuda=False)
    launches = tiledconv.plan_launches(variant, shape)
    lib = _load()
    n = image.numel()
    guard = 4 * (shape.width + tiledconv.MAX_MASK_SIZE) * tiledconv.MAX_MASK_SIZE
    shift = 1 if misalign else 0
    source = _guarded(image.detach().float(), guard, float("nan"), shift)
    out = torch.full_like(source, OUTPUT_SENTINEL)
    masks = mask.detach().float().contiguous().reshape(-1)
    k2 = shape.mask_size**2
    v = tiledconv.VARIANTS[variant]
    for launch in launches:
        if v.constant_mask:
            chunk = masks[launch.channel_begin * k2:(launch.channel_begin + launch.channel_count) * k2]
            if lib.emu_set_constant_masks(chunk.data_ptr(), chunk.numel()) != 0:
                raise RuntimeError(lib.emu_last_error().decode())
        status = lib.emu_launch(v.kernel.encode(), shape.mask_size,
                                (ctypes.c_uint * 3)(*launch.grid), (ctypes.c_uint * 3)(*launch.block),
                                source.data_ptr() + 4 * (guard + shift), masks.data_ptr(),
                                out.data_ptr() + 4 * (guard + shift),
                                *tiledconv.kernel_int_args(shape, launch))
        if status != 0:
            raise RuntimeError(f"{variant}: {lib.emu_last_error().decode()}")
    inside = slice(guard + shift, guard + shift + n)
    outside = torch.cat([out[:inside.start], out[inside.stop:]])
    if not bool((outside == OUTPUT_SENTINEL).all()):
        raise RuntimeError(f"{variant} wrote outside the output tensor")
    return out[inside].reshape(image.shape)
