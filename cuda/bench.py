"""Times the convolution kernels against cuDNN and against the memory roofline.

    python cuda/bench.py                          # 4096² and 8192², masks 3 5 7 9, table only
    python cuda/bench.py --json cuda/results/h100.json --profile cuda/results/h100-profile.json
    python cuda/bench.py --sizes 8192 --masks 5 --variants pipelined,register_blocked
    python cuda/bench.py --channels 32 --sizes 2048   # depthwise: (1, 32, 2048, 2048)

For every image size and mask size it times each kernel variant of tiledconv
and torch.nn.functional.conv2d (cuDNN, torch.backends.cudnn.benchmark on),
and a device-to-device copy of the image as the bandwidth ceiling:

- time: median over --repeats runs of CUDA-event times, after --warmup
  untimed runs; before each run a 512 MiB buffer is zeroed, which evicts the
  image from L2 (50 MB on H100) and keeps the GPU busy while Python issues the
  next launch, so the events time the kernel and not the host.
- GBps: 8 bytes per pixel (each pixel read once and written once, fp32)
  over the time; fraction_of_copy: that over the copy's bandwidth (read +
  write bytes of an image-sized copy, same run). The copy baseline is taken on
  the largest image.
- conv2d runs with TF32 off (torch.backends.cudnn.allow_tf32 = False), so it
  computes the same fp32 sums as the kernels; the row "conv2d_tf32" times it
  with TF32 on, PyTorch's default for convolutions, and is reported
  separately. speedup_vs_conv2d is always against TF32-off conv2d.

Each variant's output is checked against conv2d before it is timed.
``--json FILE`` writes {"gpu", "copy_GBps", ..., "results": [rows]} with rows
{"variant", "mask", "height", "width", "channels", "time_s", "GBps",
"fraction_of_copy", "speedup_vs_conv2d"}. ``--profile FILE`` writes the timed
runs of one variant and mask on the largest image as a simulator profile
(conv_profile.py).

Needs an NVIDIA GPU, torch with CUDA and CuPy (pip install cupy-cuda12x).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conv_profile  # noqa: E402  (this folder, see tiledconv's docstring)
import tiledconv  # noqa: E402

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
from dsgd_sim.argparse_oneline import run_command_line  # noqa: E402

FLUSH_BYTES = 512 * 2**20
BYTES_PER_PIXEL = 8  # one fp32 read + one fp32 write
CONV2D, CONV2D_TF32 = "conv2d", "conv2d_tf32"


class _Parser(argparse.ArgumentParser):
    """argparse, but every error is one line and exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _int_list(what: str, check):
    def parse(text: str) -> list[int]:
        values = []
        for item in text.split(","):
            try:
                value = int(item)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{what} {item!r} is not a whole number") from None
            problem = check(value)
            if problem:
                raise argparse.ArgumentTypeError(f"{what} {item!r} {problem}")
            values.append(value)
        return values
    parse.__name__ = what
    return parse


def _positive(value: int) -> str | None:
    return None if value >= 1 else "must be at least 1"


def _mask_side(value: int) -> str | None:
    ok = value % 2 == 1 and 1 <= value <= tiledconv.MAX_MASK_SIZE
    return None if ok else f"must be odd and between 1 and {tiledconv.MAX_MASK_SIZE}"


def _variants(text: str) -> list[str]:
    if text == "all":
        return list(tiledconv.VARIANTS)
    names = text.split(",")
    for name in names:
        if name not in tiledconv.VARIANTS:
            raise argparse.ArgumentTypeError(
                f"unknown variant {name!r}; known: {', '.join(tiledconv.VARIANTS)}")
    return names


def _one(parse):
    def single(text: str) -> int:
        values = parse(text)
        if len(values) != 1:
            raise argparse.ArgumentTypeError(f"expected one value, got {text!r}")
        return values[0]
    single.__name__ = parse.__name__
    return single


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; a bad one exits with status 2 and one line."""
    p = _Parser(prog="bench.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=_int_list("size", _positive), default=[4096, 8192],
                   help="square image sides in pixels, comma-separated (default 4096,8192)")
    p.add_argument("--masks", type=_int_list("mask", _mask_side), default=[3, 5, 7, 9],
                   help="odd mask sides, comma-separated (default 3,5,7,9)")
    p.add_argument("--channels", type=_one(_int_list("channels", _positive)), default=1,
                   help="channels (depthwise, one mask each); 1 = single-channel image")
    p.add_argument("--variants", type=_variants, default=list(tiledconv.VARIANTS),
                   help="kernel variants, comma-separated, or all (default)")
    p.add_argument("--repeats", type=_one(_int_list("repeats", _positive)), default=30,
                   help="timed runs per measurement; the median is reported (default 30)")
    p.add_argument("--warmup", type=_one(_int_list("warmup", lambda v: None if v >= 0 else
                                                   "must not be negative")), default=5,
                   help="untimed runs first (compilation, cuDNN autotuning; default 5)")
    p.add_argument("--seed", type=_one(_int_list("seed", lambda v: None if 0 <= v < 2**63 else
                                                 "must be from 0 to 2**63-1")), default=0,
                   help="seed of the images and masks (default 0)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument("--profile", metavar="FILE", help="write a simulator profile (compute_s)")
    p.add_argument("--profile-variant", type=_one(_variants), default=None,
                   help=f"variant for --profile (default {tiledconv.DEFAULT_VARIANT})")
    p.add_argument("--profile-mask", type=_one(_int_list("mask", _mask_side)), default=5,
                   help="mask side for --profile; must be among --masks (default 5)")
    args = p.parse_args(argv)
    args.profile_variant = args.profile_variant or tiledconv.DEFAULT_VARIANT
    if args.profile and args.profile_variant not in args.variants:
        p.error(f"--profile-variant {args.profile_variant} is not among --variants")
    if args.profile and args.profile_mask not in args.masks:
        p.error(f"--profile-mask {args.profile_mask} is not among --masks {args.masks}")
    largest = max(args.sizes)
    if largest * largest > tiledconv.MAX_PLANE_PIXELS:  # said here, not after finding a GPU
        p.error(f"--sizes {largest}: a {largest}x{largest} plane is more than the "
                f"{tiledconv.MAX_PLANE_PIXELS:,} pixels the kernels index")
    for flag in ("json", "profile"):
        path = getattr(args, flag)
        if path is None:
            continue
        if not path:  # else no file at all, found out only after the whole run
            p.error(f"--{flag}: empty file name")
        if path == "-":  # else a file named "-"; only python -m dsgd_sim reads it as stdout
            p.error(f"--{flag} '-': this command writes files, not stdout; name a file "
                    f"(/dev/stdout writes there)")
        if conv_profile.written_in_place(path):  # /dev/stdout, a pipe: nothing made beside it
            continue
        if path.endswith("/"):  # else the file the name ends in, not a folder, is written
            p.error(f"--{flag} {path}: ends in a slash, not a file name")
        if len(Path(path).name.encode()) > 255:
            p.error(f"--{flag} {path}: a file name is at most 255 bytes long")
        if not Path(path).resolve().parent.is_dir():
            p.error(f"--{flag} {path}: folder {Path(path).parent} does not exist")
        if Path(path).is_dir():
            p.error(f"--{flag} {path}: is a folder, not a file name")
        folder = Path(path).resolve().parent
        try:  # root passes every access() check: make a file beside it, as the output will be
            tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check-").close()
        except OSError as error:
            p.error(f"--{flag} {path}: cannot write into {folder} ({error.strerror})")
    if args.json and args.profile and Path(args.json).resolve() == Path(args.profile).resolve():
        p.error(f"--json and --profile name the same file {args.json!r}")
    return args


def result_row(variant: str, mask: int, height: int, width: int, channels: int, time_s: float,
               copy_GBps: float, conv2d_time_s: float) -> dict:
    """One row of the JSON results: time, bandwidth, share of copy bandwidth, speedup."""
    gbps = BYTES_PER_PIXEL * channels * height * width / time_s / 1e9
    return {"variant": variant, "mask": mask, "height": height, "width": width,
            "channels": channels, "time_s": time_s, "GBps": gbps,
            "fraction_of_copy": gbps / copy_GBps, "speedup_vs_conv2d": conv2d_time_s / time_s}


def format_table(rows: list[dict]) -> str:
    """The rows as a Markdown table (the one the README shows)."""
    lines = ["| variant | mask | image | time (ms) | GB/s | of copy | vs conv2d |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        image = f"{r['channels']}x{r['height']}x{r['width']}" if r["channels"] > 1 else \
            f"{r['height']}x{r['width']}"
        lines.append(f"| {r['variant']} | {r['mask']}x{r['mask']} | {image} | "
                     f"{r['time_s'] * 1e3:.3f} | {r['GBps']:.0f} | "
                     f"{r['fraction_of_copy']:.0%} | {r['speedup_vs_conv2d']:.2f}x |")
    return "\n".join(lines)


class Timer:
    """CUDA-event timing with an L2 flush before every run."""

    def __init__(self, device: torch.device, repeats: int, warmup: int):
        self.repeats, self.warmup = repeats, warmup
        self.flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=device)

    def samples(self, fn) -> list[float]:
        """Seconds per run of fn over the timed repeats."""
        for _ in range(self.warmup):
            fn()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(self.repeats)]
        for start, end in events:
            self.flush.zero_()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) / 1e3 for start, end in events]


def conv2d_reference(image: torch.Tensor, masks: torch.Tensor, tf32: bool):
    """F.conv2d on the same problem, as a function of no arguments."""
    k = masks.shape[-1]
    x = image if image.dim() == 4 else image[None, None]
    w = masks[:, None] if masks.dim() == 3 else masks[None, None]

    def run():
        torch.backends.cudnn.allow_tf32 = tf32
        try:
            return F.conv2d(x, w, padding=k // 2, groups=x.shape[1])
        finally:
            torch.backends.cudnn.allow_tf32 = False
    return run


def make_problem(size: int, mask: int, channels: int, device,
                 seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A random image (H, W) or (1, C, H, W) in [0, 1) and masks with sums near 1, drawn from
    ``seed``, the size and the mask side (each problem of one run its own draw)."""
    # one 32-bit draw of the three numbers: torch's CPU generator keeps only a seed's low 32 bits
    gen = torch.Generator(device=device).manual_seed(
        int(np.random.SeedSequence([seed, size, mask]).generate_state(1)[0]))
    shape = (size, size) if channels == 1 else (1, channels, size, size)
    image = torch.rand(shape, generator=gen, device=device)
    masks = torch.randn((channels, mask, mask), generator=gen, device=device) / mask
    return image, (masks[0] if channels == 1 else masks)


def measure(args, timer: Timer, device) -> tuple[float, list[dict], dict]:
    """Copy bandwidth, result rows, and the samples of every (variant, mask, size)."""
    largest = max(args.sizes)
    src = torch.rand((args.channels, largest, largest), device=device)
    dst = torch.empty_like(src)
    copy_s = statistics.median(timer.samples(lambda: dst.copy_(src)))
    copy_GBps = 2 * src.numel() * 4 / copy_s / 1e9
    del src, dst
    rows, samples = [], {}
    for size in args.sizes:
        for mask in args.masks:
            image, masks = make_problem(size, mask, args.channels, device, args.seed)
            reference = conv2d_reference(image, masks, tf32=False)
            expected = reference().reshape(image.shape)
            candidates = {CONV2D: reference,
                          CONV2D_TF32: conv2d_reference(image, masks, tf32=True)}
            for name in args.variants:
                check_variant_output(name, image, masks, expected)
                candidates[name] = lambda name=name: tiledconv.conv2d(image, masks, name)
            times = {}
            for name, fn in candidates.items():
                samples[name, mask, size] = timer.samples(fn)
                times[name] = statistics.median(samples[name, mask, size])
            for name, t in times.items():
                rows.append(result_row(name, mask, size, size, args.channels, t, copy_GBps,
                                       times[CONV2D]))
            print(f"bench.py: {size}x{size} mask {mask} done", file=sys.stderr)
    return copy_GBps, rows, samples


def check_variant_output(name: str, image, masks, expected) -> None:
    """Raises RuntimeError when a variant disagrees with conv2d (TF32 off)."""
    got = tiledconv.conv2d(image, masks, name)
    error = (got - expected).abs().max().item()
    if not error <= 1e-3:
        raise RuntimeError(f"variant {name} differs from conv2d by {error:g} "
                           f"(image {list(image.shape)}, mask {masks.shape[-1]})")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("bench.py: no CUDA device is visible; this benchmark needs an NVIDIA GPU",
              file=sys.stderr)
        return 1
    try:
        tiledconv._import_cupy()
    except ImportError as error:
        print(f"bench.py: {error}", file=sys.stderr)
        return 1
    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        copy_GBps, rows, samples = measure(args, Timer(device, args.repeats, args.warmup), device)
    except Exception as error:  # a failed compile, launch or check: one line, exit 1
        first_line = (str(error).splitlines() or [""])[0]
        print(f"bench.py: {type(error).__name__}: {first_line}", file=sys.stderr)
        return 1
    gpu = torch.cuda.get_device_name(device)
    command = "python cuda/bench.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"{gpu}: device-to-device copy {copy_GBps:.0f} GB/s (read + write)\n")
    print(format_table(rows))
    try:
        if args.json:
            conv_profile.write_json(args.json, report(gpu, copy_GBps, rows, args, command))
        if args.profile:
            k, size = args.profile_mask, max(args.sizes)
            profile = conv_profile.conv_profile(
                samples[args.profile_variant, k, size], variant=args.profile_variant,
                mask_size=k, height=size, width=size, channels=args.channels, gpu=gpu,
                command=command)
            conv_profile.write_profile(args.profile, profile)
    except OSError as error:  # a full disk, a folder gone during the run: the table is above
        print(f"bench.py: error: {error}", file=sys.stderr)
        return 1
    return 0


def report(gpu: str, copy_GBps: float, rows: list[dict], args, command: str) -> dict:
    """The --json document."""
    import cupy
    return {"gpu": gpu, "copy_GBps": copy_GBps,
            "tf32": "conv2d rows: torch.backends.cudnn.allow_tf32 = False (same fp32 sums as "
                    "the kernels); conv2d_tf32 rows: True (PyTorch's default)",
            "cudnn_benchmark": True,
            "timing": f"median of {args.repeats} CUDA-event times after {args.warmup} warm-up "
                      f"runs, {FLUSH_BYTES // 2**20} MiB zeroed before each run (L2 flush)",
            "bytes_per_pixel": BYTES_PER_PIXEL, "seed": args.seed, "command": command,
            "torch": torch.__version__, "cuda": torch.version.cuda, "cupy": cupy.__version__,
            "results": rows}


if __name__ == "__main__":
    sys.exit(run_command_line(main))
