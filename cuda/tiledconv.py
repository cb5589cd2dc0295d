"""Run-time loader for the 2-D convolution kernels in ``cuda/kernels``.

Each variant is exposed as a function of torch tensors::

    import sys; sys.path.insert(0, "cuda")   # this folder; see below
    import tiledconv
    out = tiledconv.conv2d(image, mask, variant="pipelined")

``image`` is a float32 CUDA tensor of shape (H, W) with a (K, K) mask, or
(N, C, H, W) with one mask per channel, shape (C, K, K) (depthwise). K is odd,
1 <= K <= 15. The result equals ``F.conv2d(image, mask, padding=K // 2)``
(``groups=C`` for the 4-D case): a zero-padded "same" cross-correlation.

The kernels are compiled at run time with NVRTC through CuPy (``pip install
cupy-cuda12x``; optional: nothing else in the project needs it), one small
module per (variant, mask size), on first use. CuPy keeps the binaries in its
kernel cache (``~/.cupy/kernel_cache``, keyed by source, options and GPU
architecture), and this module keeps the loaded modules for the process.
docs/cuda.md says why NVRTC and not ``torch.utils.cpp_extension``.

Why a module named ``tiledconv`` in a folder with no ``__init__.py``: GPU
machines have NVIDIA's cuda-python installed, whose import name is ``cuda``
(``cuda.bindings``, ``cuda.core``). A regular package ``cuda`` here would
shadow it for anything run from the repository root; a folder without
``__init__.py`` is at most one portion of the ``cuda`` namespace and never
hides NVIDIA's. So this loader is imported by its own name, with this folder
on ``sys.path`` (``python cuda/bench.py`` puts it there by itself).

Argument checks (types, dtypes, shapes, mask sizes, device) all run before
any GPU or CuPy work, and raise TypeError or ValueError naming the bad value.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy
import torch

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"

MAX_MASK_SIZE = 15
CONSTANT_MASK_FLOATS = 16384  # DSGD_CONSTANT_MASK_FLOATS in conv_common.cuh: 64 KiB
MAX_GRID_YZ = 65535
MAX_PLANE_PIXELS = 2**31 - 1  # kernels index within a plane with 32-bit ints
MAX_PLANES = 2**31 - 1 - MAX_GRID_YZ  # kernels count planes with 32-bit ints, z += gridDim.z


@dataclass(frozen=True)
class Variant:
    """One kernel: where it lives and how it is launched.

    The block shape and tile size here must match the constants in the kernel
    source; the emulated tests (tests/test_cuda_kernels.py) would catch a
    mismatch as wrong results.
    """

    name: str
    source: str  # file in KERNEL_DIR
    kernel: str  # template name; instantiated as kernel<K>
    block: tuple[int, int]  # threads (x, y)
    outputs_per_block: tuple[int, int]  # output tile (width, height); 0 = 33 - K
    constant_mask: bool  # mask read from __constant__ c_masks
    summary: str
    strip_tiles: int = 1  # output tiles per block, down a strip (DSGD_PIPELINED_STRIP_TILES)

    def tile(self, mask_size: int) -> tuple[int, int]:
        """Output tile (width, height) one block computes for a K x K mask."""
        w, h = self.outputs_per_block
        return (w or 33 - mask_size, h or 33 - mask_size)


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("naive", "naive.cu", "conv_naive", (32, 8), (32, 8), False,
                "one output per thread; image and mask from global memory"),
        Variant("constant", "constant.cu", "conv_constant", (32, 8), (32, 8), True,
                "one output per thread; mask in constant memory"),
        Variant("tiled_input", "tiled_input.cu", "conv_tiled_input", (32, 32), (0, 0), True,
                "shared-memory tile, block = input tile (32x32), halo threads idle"),
        Variant("tiled_output", "tiled_output.cu", "conv_tiled_output", (32, 16), (32, 16), True,
                "shared-memory tile, block = output tile (32x16), halo loaded in a loop"),
        Variant("l2_halo", "l2_halo.cu", "conv_l2_halo", (32, 16), (32, 16), True,
                "block's own pixels in shared memory, halo cells read through L2"),
        Variant("register_blocked", "register_blocked.cu", "conv_register_blocked", (32, 8),
                (128, 32), True,
                "4x4 outputs per thread, float4 loads and streaming float4 stores"),
        Variant("pipelined", "pipelined.cu", "conv_pipelined", (32, 8), (128, 32), True,
                "register_blocked's patches; each block walks a strip of 8 tiles, the next "
                "tile's rows copied (cp.async) into a ring of shared rows during this one's "
                "arithmetic", strip_tiles=8),
    )
}
DEFAULT_VARIANT = "pipelined"


@dataclass(frozen=True)
class ConvShape:
    """The problem: batch x channels planes of height x width, K x K masks."""

    batch: int
    channels: int
    height: int
    width: int
    mask_size: int


@dataclass(frozen=True)
class Launch:
    """One kernel launch covering channels [channel_begin, +channel_count) of every image."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    channel_begin: int
    channel_count: int


def check_inputs(image, mask, *, require_cuda: bool = True) -> ConvShape:
    """Validates image and mask and returns the problem shape.

    Raises TypeError for a non-tensor or a dtype other than float32, and
    ValueError for bad shapes, mask sizes or devices. Touches no GPU.
    """
    for label, t in (("image", image), ("mask", mask)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{label} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != torch.float32:
            raise TypeError(f"{label} must be float32, got {t.dtype}")
    shape = _shape_of(tuple(image.shape), tuple(mask.shape))
    _check_device(image, mask, require_cuda)
    return shape


def _shape_of(image_shape: tuple, mask_shape: tuple) -> ConvShape:
    if len(image_shape) == 2:
        if len(mask_shape) != 2:
            raise ValueError(f"a 2-D image (H, W) needs a 2-D mask (K, K), got mask shape "
                             f"{list(mask_shape)}")
        batch, channels, (height, width) = 1, 1, image_shape
    elif len(image_shape) == 4:
        batch, channels, height, width = image_shape
        if len(mask_shape) != 3 or mask_shape[0] != channels:
            raise ValueError(f"a 4-D image (N, C, H, W) with C={channels} needs masks of shape "
                             f"(C, K, K) = ({channels}, K, K), got {list(mask_shape)}")
    else:
        raise ValueError(f"image must be (H, W) or (N, C, H, W), got shape {list(image_shape)}")
    if min(batch, channels, height, width) < 1:
        raise ValueError(f"image must not be empty, got shape {list(image_shape)}")
    if height * width > MAX_PLANE_PIXELS:
        raise ValueError(f"image plane {height}x{width} exceeds 2^31-1 pixels")
    if batch * channels > MAX_PLANES:  # past it the kernels' plane count wraps: no output at all
        raise ValueError(f"image has {batch}x{channels} planes, more than {MAX_PLANES:,}")
    k_rows, k_cols = mask_shape[-2:]
    if k_rows != k_cols:
        raise ValueError(f"mask must be square, got {k_rows}x{k_cols}")
    if k_rows % 2 == 0 or not 1 <= k_rows <= MAX_MASK_SIZE:
        raise ValueError(f"mask side must be odd and between 1 and {MAX_MASK_SIZE}, got {k_rows}")
    return ConvShape(batch, channels, height, width, k_rows)


def _check_device(image: torch.Tensor, mask: torch.Tensor, require_cuda: bool) -> None:
    if image.device != mask.device:
        raise ValueError(f"image and mask must be on one device, got {image.device} and "
                         f"{mask.device}")
    if require_cuda and image.device.type != "cuda":
        raise ValueError(f"image and mask must be CUDA tensors, got device {image.device}")


def check_variant(variant: str) -> Variant:
    """The Variant named variant; ValueError listing the known ones otherwise."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
    return VARIANTS[variant]


def plan_launches(variant: str, shape: ConvShape) -> list[Launch]:
    """The launches that compute shape with variant, in order.

    Constant-memory variants launch once per group of channels whose masks
    fit in 64 KiB of constant memory; the loader copies that group's masks
    into c_masks before each launch.
    """
    v = check_variant(variant)
    tile_w, tile_h = v.tile(shape.mask_size)
    grid_x = _ceil_div(shape.width, tile_w)
    grid_y = _ceil_div(_ceil_div(shape.height, tile_h), v.strip_tiles)
    if grid_y > MAX_GRID_YZ:
        raise ValueError(f"image height {shape.height} too large for variant {variant!r} "
                         f"({grid_y} block rows > {MAX_GRID_YZ})")
    per_launch = shape.channels
    if v.constant_mask:
        per_launch = min(per_launch, CONSTANT_MASK_FLOATS // shape.mask_size**2)
    launches = []
    for begin in range(0, shape.channels, per_launch):
        count = min(per_launch, shape.channels - begin)
        grid_z = min(shape.batch * count, MAX_GRID_YZ)
        launches.append(Launch((grid_x, grid_y, grid_z), (*v.block, 1), begin, count))
    return launches


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def kernel_source(variant: str) -> str:
    """The variant's source with this folder's own #include "..." files inlined.

    Inlining makes the source text CuPy hashes for its cache cover the
    headers too, so editing a header recompiles.
    """
    return _inline_includes(KERNEL_DIR / check_variant(variant).source, set())


def _inline_includes(path: Path, seen: set) -> str:
    if path in seen:  # headers have include guards; one copy is enough
        return ""
    seen.add(path)
    out = []
    for line in path.read_text().splitlines():
        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        out.append(_inline_includes(path.parent / m.group(1), seen) if m else line)
    return "\n".join(out) + "\n"


def conv2d(image: torch.Tensor, mask: torch.Tensor, variant: str = DEFAULT_VARIANT) -> torch.Tensor:
    """Convolves image with mask on the GPU with the named kernel variant.

    Shapes: (H, W) with (K, K), or (N, C, H, W) with (C, K, K). Runs on
    torch's current stream of the image's device and returns a new tensor.
    """
    shape = check_inputs(image, mask)
    launches = plan_launches(variant, shape)
    image, mask = image.contiguous(), mask.contiguous()
    out = torch.empty_like(image)
    _GpuRunner.get(variant, shape.mask_size, image.device).run(launches, image, mask, out, shape)
    return out


def kernel_int_args(shape: ConvShape, launch: Launch) -> tuple[int, ...]:
    """The kernel's integer arguments (after input, masks, output), in signature order."""
    return (shape.batch, shape.channels, launch.channel_begin, launch.channel_count,
            shape.height, shape.width)


class _GpuRunner:
    """One compiled (variant, mask size) on one device, with its c_masks address."""

    _cache: dict = {}
    _lock = threading.Lock()

    @classmethod
    def get(cls, variant: str, mask_size: int, device: torch.device) -> "_GpuRunner":
        key = (variant, mask_size, device.index)
        with cls._lock:
            if key not in cls._cache:
                cls._cache[key] = cls(VARIANTS[variant], mask_size, device)
            return cls._cache[key]

    def __init__(self, variant: Variant, mask_size: int, device: torch.device):
        cp = _import_cupy()
        self.cp = cp
        self.device = device
        self.mask_size = mask_size
        self.constant_mask = variant.constant_mask
        expression = f"{variant.kernel}<{mask_size}>"
        with cp.cuda.Device(device.index):
            module = cp.RawModule(code=kernel_source(variant.name), options=("-std=c++17",),
                                  name_expressions=[expression])
            self.function = module.get_function(expression)
            # Only kernels that read c_masks are sure to keep it in the module.
            self.c_masks_ptr = module.get_global("c_masks").ptr if self.constant_mask else None
        # c_masks is shared by every launch of this module: the event orders a
        # launch on one stream after the previous launch on another, and the lock
        # keeps two host threads from both waiting on the same event and both
        # copying their masks before either kernel runs.
        self.last_launch = None
        self.launching = threading.Lock()

    def run(self, launches, image, mask, out, shape: ConvShape) -> None:
        cp, k2 = self.cp, self.mask_size**2
        stream = torch.cuda.current_stream(self.device)
        with self.launching, cp.cuda.Device(self.device.index), _cupy_stream(cp, stream):
            if self.last_launch is not None:
                stream.wait_event(self.last_launch)
            for launch in launches:
                if self.constant_mask:
                    cp.cuda.runtime.memcpyAsync(
                        self.c_masks_ptr, mask.data_ptr() + 4 * launch.channel_begin * k2,
                        4 * launch.channel_count * k2, cp.cuda.runtime.memcpyDeviceToDevice,
                        stream.cuda_stream)
                pointers = tuple(numpy.uint64(t.data_ptr()) for t in (image, mask, out))
                ints = tuple(numpy.int32(i) for i in kernel_int_args(shape, launch))
                self.function(launch.grid, launch.block, pointers + ints)
            self.last_launch = torch.cuda.Event()
            self.last_launch.record(stream)


class _StreamHandle:
    """A raw cudaStream_t as the CUDA stream protocol (__cuda_stream__) describes it."""

    def __init__(self, pointer: int):
        self.pointer = pointer

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.pointer)


def _cupy_stream(cp, stream: torch.cuda.Stream):
    """torch's stream as a CuPy stream, for a `with` block; no copy, no synchronisation.

    CuPy 14 deprecates ExternalStream for Stream.from_external (the stream
    protocol); older CuPy has only ExternalStream.
    """
    if hasattr(cp.cuda.Stream, "from_external"):
        return cp.cuda.Stream.from_external(_StreamHandle(stream.cuda_stream))
    return cp.cuda.ExternalStream(stream.cuda_stream, stream.device.index)


def _import_cupy():
    try:
        import cupy
    except ImportError as exc:
        raise ImportError("tiledconv compiles its kernels with CuPy's NVRTC: install the CuPy "
                          "wheel matching your CUDA, e.g. pip install cupy-cuda12x") from exc
    return cupy
