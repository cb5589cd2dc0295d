"""Tests for the CUDA convolution kernels (cuda/), their loader and their benchmark.

On any machine: every kernel source compiles for sm_90 with nvcc (where nvcc is
installed); the loader rejects bad arguments before touching a GPU; its launch
plan is right; every kernel, executed by the CPU emulator (cuda/cpu_emulation)
with the loader's launch plan, equals F.conv2d; the folder does not shadow
NVIDIA's `cuda` package; the benchmark's CLI and its profile output.

On a machine with a CUDA GPU and CuPy: every variant equals F.conv2d (TF32
off) on the GPU for sizes that are not multiples of the tile, 1x1 images, all
mask sizes up to 15x15 and batched depthwise input. Skipped with the reason
elsewhere.
"""

from __future__ import annotations

import dataclasses
import re
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
CUDA_DIR = REPO / "cuda"
sys.path.insert(0, str(CUDA_DIR))

import conv_profile  # noqa: E402
import tiledconv  # noqa: E402
import tiledconv_cpu  # noqa: E402

# bench.py under a name of its own, so that no other test's `bench` can collide with it.
_spec = importlib.util.spec_from_file_location("cuda_bench", CUDA_DIR / "bench.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

KERNEL_FILES = sorted(p.name for p in tiledconv.KERNEL_DIR.glob("*.cu"))
MASK_SIZES = [1, 3, 5, 7, 9, 11, 13, 15]
NVCC = shutil.which("nvcc")

needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
needs_host_compiler = pytest.mark.skipif(tiledconv_cpu.host_compiler() is None,
                                         reason="no C++ compiler (g++) for the kernel emulator")
HAS_CUPY = importlib.util.find_spec("cupy") is not None
needs_gpu = pytest.mark.skipif(
    not torch.cuda.is_available() or not HAS_CUPY,
    reason="needs a CUDA device and CuPy (pip install 'cupy-cuda12x[ctk]'); "
           f"cuda available: {torch.cuda.is_available()}, cupy installed: {HAS_CUPY}")


def reference(image: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """F.conv2d on the CPU in float64: the well-defined answer every variant must give."""
    k = mask.shape[-1]
    x, w = image.double().cpu(), mask.double().cpu()
    if x.dim() == 2:
        return F.conv2d(x[None, None], w[None, None], padding=k // 2)[0, 0]
    return F.conv2d(x, w[:, None], padding=k // 2, groups=x.shape[1])


def assert_matches(got: torch.Tensor, image: torch.Tensor, mask: torch.Tensor, label: str):
    """fp32 result within rounding of the float64 reference (bound scales with sum |x||m|)."""
    expected = reference(image, mask)
    scale = reference(image.abs(), mask.abs()).max().item() + 1e-30
    error = (got.double().cpu() - expected).abs().max().item()
    assert got.shape == image.shape, label
    assert error <= 2e-6 * scale, f"{label}: max error {error:g} (scale {scale:g})"


# ---------------------------------------------------------------- compilation

@pytest.fixture(scope="module")
def nvcc_results(tmp_path_factory):
    """Compiles every kernel file with nvcc -cubin -arch=sm_90, all at once (they are slow)."""
    out = tmp_path_factory.mktemp("cubin")
    procs = {name: subprocess.Popen([NVCC, "-cubin", "-arch=sm_90", "-o", str(out / f"{name}.cubin"),
                                     str(tiledconv.KERNEL_DIR / name)],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for name in KERNEL_FILES}
    return {name: (p.wait(timeout=240), p.stdout.read(), out / f"{name}.cubin")
            for name, p in procs.items()}


@needs_nvcc
@pytest.mark.parametrize("name", KERNEL_FILES)
def test_kernel_source_compiles_to_sm90_cubin(nvcc_results, name):
    status, output, cubin = nvcc_results[name]
    assert status == 0, output
    assert "warning" not in output.lower(), output
    assert cubin.stat().st_size > 0


def _find_libnvrtc() -> str | None:
    """libnvrtc from the system, CUDA_HOME or NVIDIA's pip wheels (torch's CUDA builds ship one)."""
    import ctypes.util
    import glob
    import os
    import site
    found = ctypes.util.find_library("nvrtc")
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME", "/usr/local/cuda") + "/lib64"]
    roots += [f"{p}/nvidia/*/lib" for p in site.getsitepackages()]
    hits = sorted(h for r in roots for h in glob.glob(f"{r}/libnvrtc.so*") if "builtins" not in h)
    return hits[0] if hits else None


LIBNVRTC = _find_libnvrtc()


@pytest.mark.skipif(LIBNVRTC is None, reason="libnvrtc not found (CUDA toolkit or NVIDIA wheel)")
@pytest.mark.parametrize("variant", list(tiledconv.VARIANTS))
def test_loader_source_compiles_with_nvrtc_by_name_expression(variant):
    """What the loader hands CuPy: the inlined source, compiled by NVRTC for kernel<K>."""
    import ctypes
    lib = ctypes.CDLL(LIBNVRTC)
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    for k in (1, 15):
        prog, expr = ctypes.c_void_p(), f"{tiledconv.VARIANTS[variant].kernel}<{k}>".encode()
        assert lib.nvrtcCreateProgram(ctypes.byref(prog), tiledconv.kernel_source(variant).encode(),
                                      b"kernel.cu", 0, None, None) == 0
        assert lib.nvrtcAddNameExpression(prog, expr) == 0
        options = (ctypes.c_char_p * 2)(b"-std=c++17", b"-arch=compute_90")
        status = lib.nvrtcCompileProgram(prog, 2, options)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        assert status == 0, log.value.decode()
        lowered = ctypes.c_char_p()
        assert lib.nvrtcGetLoweredName(prog, expr, ctypes.byref(lowered)) == 0
        assert lowered.value.decode().startswith(f"_Z{len(tiledconv.VARIANTS[variant].kernel)}")
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def test_every_variant_has_its_kernel_file_and_template():
    assert sorted(v.source for v in tiledconv.VARIANTS.values()) == KERNEL_FILES
    for v in tiledconv.VARIANTS.values():
        source = tiledconv.kernel_source(v.name)
        assert '#include "' not in source, "local headers are inlined for NVRTC's cache key"
        assert re.search(rf"\b{v.kernel}\(", source), v.kernel
        assert "__constant__ float c_masks[" in source
        assert f"DSGD_INSTANTIATE_ALL_MASKS({v.kernel})" in source


# ------------------------------------------------------------ argument checks

def _img(*shape, dtype=torch.float32, device="cpu"):
    return torch.zeros(shape, dtype=dtype, device=device)


BAD_ARGUMENTS = [
    ("image is a list", [[0.0]], _img(3, 3), TypeError, "image must be a torch.Tensor, got list"),
    ("mask is an array", _img(4, 4), 0.5, TypeError, "mask must be a torch.Tensor, got float"),
    ("float64 image", _img(4, 4, dtype=torch.float64), _img(3, 3), TypeError,
     "image must be float32, got torch.float64"),
    ("float16 mask", _img(4, 4), _img(3, 3, dtype=torch.float16), TypeError,
     "mask must be float32, got torch.float16"),
    ("3-D image", _img(2, 4, 4), _img(3, 3), ValueError, "image must be (H, W) or (N, C, H, W)"),
    ("2-D image, 3-D mask", _img(4, 4), _img(1, 3, 3), ValueError, "needs a 2-D mask (K, K)"),
    ("wrong mask count", _img(1, 3, 4, 4), _img(2, 3, 3), ValueError, "C=3 needs masks of shape"),
    ("conv2d weight layout", _img(1, 3, 4, 4), _img(3, 1, 3, 3), ValueError, "(C, K, K)"),
    ("even mask", _img(4, 4), _img(4, 4), ValueError, "odd and between 1 and 15, got 4"),
    ("17x17 mask", _img(4, 4), _img(17, 17), ValueError, "odd and between 1 and 15, got 17"),
    ("non-square mask", _img(4, 4), _img(3, 5), ValueError, "mask must be square, got 3x5"),
    ("empty image", _img(0, 5), _img(3, 3), ValueError, "must not be empty"),
    ("empty batch", _img(0, 1, 5, 5), _img(1, 3, 3), ValueError, "must not be empty"),
    ("CPU tensors", _img(4, 4), _img(3, 3), ValueError, "must be CUDA tensors, got device cpu"),
    ("two devices", _img(4, 4), _img(3, 3, device="meta"), ValueError,
     "must be on one device, got cpu and meta"),
    # 2^31 planes of one pixel: the kernels' 32-bit count of planes would wrap and write nothing
    ("2^31 planes", _img(2**16, 2**15, 1, 1, device="meta"), _img(2**15, 3, 3, device="meta"),
     ValueError, "image has 65536x32768 planes, more than 2,147,418,112"),
]


@pytest.mark.parametrize("label,image,mask,error,message", BAD_ARGUMENTS,
                         ids=[b[0] for b in BAD_ARGUMENTS])
def test_conv2d_rejects_bad_arguments_before_any_gpu_work(monkeypatch, label, image, mask,
                                                          error, message):
    def no_gpu(*args, **kwargs):
        raise AssertionError("reached the GPU path before the arguments were checked")
    monkeypatch.setattr(tiledconv, "_import_cupy", no_gpu)
    monkeypatch.setattr(tiledconv._GpuRunner, "get", no_gpu)
    with pytest.raises(error) as caught:
        tiledconv.conv2d(image, mask)
    assert message in str(caught.value)


def test_conv2d_rejects_unknown_variant_naming_the_known_ones():
    with pytest.raises(ValueError, match="unknown variant 'winograd'; known: naive, constant"):
        tiledconv.plan_launches("winograd", tiledconv.ConvShape(1, 1, 8, 8, 3))


def test_check_inputs_returns_the_problem_shape_for_cpu_tensors_when_allowed():
    shape = tiledconv.check_inputs(_img(2, 3, 5, 7), _img(3, 9, 9), require_cuda=False)
    assert shape == tiledconv.ConvShape(batch=2, channels=3, height=5, width=7, mask_size=9)


def test_loader_import_touches_neither_cupy_nor_the_cuda_namespace(tmp_path):
    code = ("import sys; import torch; before = set(sys.modules); sys.path.insert(0, sys.argv[1]); "
            "import tiledconv, bench; new = set(sys.modules) - before; "
            "print(sorted(m for m in new if m.split('.')[0] in ('cupy', 'cuda')))")
    out = subprocess.run([sys.executable, "-c", code, str(CUDA_DIR)], capture_output=True,
                         text=True, check=True, cwd=tmp_path).stdout.strip()
    assert out == "[]"


# ---------------------------------------------------------------- launch plan

def test_plan_covers_the_image_with_tiles_of_each_variant():
    shape = tiledconv.ConvShape(1, 1, 100, 300, 5)
    grids = {name: tiledconv.plan_launches(name, shape)[0].grid for name in tiledconv.VARIANTS}
    assert grids == {"naive": (10, 13, 1), "constant": (10, 13, 1), "tiled_input": (11, 4, 1),
                     "tiled_output": (10, 7, 1), "l2_halo": (10, 7, 1),
                     "register_blocked": (3, 4, 1), "pipelined": (3, 1, 1)}


def test_plan_gives_each_pipelined_block_a_strip_of_eight_tiles():
    # 1000 rows = 32 tiles of 32 rows (the last one partial) = 4 strips of 8.
    shape = tiledconv.ConvShape(1, 1, 1000, 129, 5)
    assert tiledconv.plan_launches("pipelined", shape)[0].grid == (2, 4, 1)
    shape = dataclasses.replace(shape, height=1025)  # 33 tiles: a fifth strip of one tile
    assert tiledconv.plan_launches("pipelined", shape)[0].grid == (2, 5, 1)


def test_plan_splits_channels_into_groups_whose_masks_fit_constant_memory():
    shape = tiledconv.ConvShape(batch=2, channels=100, height=8, width=8, mask_size=15)
    launches = tiledconv.plan_launches("register_blocked", shape)
    assert [(l.channel_begin, l.channel_count) for l in launches] == [(0, 72), (72, 28)]
    assert [l.grid[2] for l in launches] == [144, 56]
    assert len(tiledconv.plan_launches("naive", shape)) == 1  # mask read from global memory


def test_plan_caps_grid_z_and_rejects_images_too_tall_for_the_grid():
    many = tiledconv.plan_launches("naive", tiledconv.ConvShape(70000, 1, 1, 1, 3))
    assert many[0].grid == (1, 1, 65535)
    with pytest.raises(ValueError, match="image height 600000 too large for variant 'naive'"):
        tiledconv.plan_launches("naive", tiledconv.ConvShape(1, 1, 600000, 1, 3))


# ------------------------------------------------------- emulated correctness

EMULATED_SHAPES = [(1, 1), (37, 70), (45, 131)]  # 131: not a multiple of 4 or of any tile


@needs_host_compiler
@pytest.mark.parametrize("variant", list(tiledconv.VARIANTS))
def test_emulated_variant_matches_conv2d_on_odd_sizes_1x1_and_masks_to_15(variant):
    gen = torch.Generator().manual_seed(1)
    for height, width in EMULATED_SHAPES:
        for k in (1, 3, 5, 15):
            image = torch.randn(height, width, generator=gen)
            mask = torch.randn(k, k, generator=gen)
            got = tiledconv_cpu.conv2d_emulated(image, mask, variant)
            assert_matches(got, image, mask, f"{variant} {height}x{width} mask {k}")


@needs_host_compiler
@pytest.mark.parametrize("variant", list(tiledconv.VARIANTS))
def test_emulated_variant_matches_conv2d_for_every_mask_size(variant):
    gen = torch.Generator().manual_seed(2)
    image = torch.randn(21, 36, generator=gen)
    for k in MASK_SIZES:
        mask = torch.randn(k, k, generator=gen)
        assert_matches(tiledconv_cpu.conv2d_emulated(image, mask, variant), image, mask,
                       f"{variant} mask {k}")


@needs_host_compiler
@pytest.mark.parametrize("variant", list(tiledconv.VARIANTS))
def test_emulated_variant_matches_depthwise_conv2d_on_a_batch(variant):
    gen = torch.Generator().manual_seed(3)
    image = torch.randn(2, 3, 19, 23, generator=gen)
    mask = torch.randn(3, 7, 7, generator=gen)
    got = tiledconv_cpu.conv2d_emulated(image, mask, variant, misalign=True)
    assert_matches(got, image, mask, f"{variant} depthwise, misaligned pointers")


@needs_host_compiler
@pytest.mark.parametrize("misalign", [False, True], ids=["float4", "scalar"])
def test_emulated_pipelined_strips_wrap_their_ring_of_rows(misalign):
    """Tall images: many tiles per strip (the ring of shared rows wraps), a partial last strip."""
    gen = torch.Generator().manual_seed(7)
    for height, width, k in [(300, 8, 3), (301, 20, 15), (520, 4, 1), (97, 132, 7)]:
        image = torch.randn(height, width, generator=gen)
        mask = torch.randn(k, k, generator=gen)
        got = tiledconv_cpu.conv2d_emulated(image, mask, "pipelined", misalign=misalign)
        assert_matches(got, image, mask, f"pipelined {height}x{width} mask {k}")


@needs_host_compiler
@pytest.mark.parametrize("variant", ["constant", "register_blocked", "pipelined"])
def test_emulated_channel_groups_and_grid_stride_loop_cover_every_plane(monkeypatch, variant):
    monkeypatch.setattr(tiledconv, "MAX_GRID_YZ", 3)  # forces the kernels' plane loop
    gen = torch.Generator().manual_seed(4)
    image = torch.randn(2, 75, 3, 5, generator=gen)  # 75 channels of 15x15: two groups
    mask = torch.randn(75, 15, 15, generator=gen)
    assert len(tiledconv.plan_launches(variant, tiledconv.check_inputs(
        image, mask, require_cuda=False))) == 2
    assert_matches(tiledconv_cpu.conv2d_emulated(image, mask, variant), image, mask, variant)


@needs_host_compiler
def test_emulation_detects_a_launch_plan_that_does_not_match_the_kernel(monkeypatch):
    wrong = dataclasses.replace(tiledconv.VARIANTS["tiled_output"], block=(32, 8))
    monkeypatch.setitem(tiledconv.VARIANTS, "tiled_output", wrong)
    image, mask = torch.randn(40, 40), torch.randn(3, 3)
    got = tiledconv_cpu.conv2d_emulated(image, mask, "tiled_output")
    assert not torch.allclose(got.double(), reference(image, mask), atol=1e-3)


# ----------------------------------------------------- the `cuda` namespace

def test_cuda_folder_is_not_a_regular_package():
    assert not (CUDA_DIR / "__init__.py").exists()


@pytest.mark.parametrize("regular", [True, False], ids=["regular-package", "namespace-package"])
def test_repo_cuda_folder_does_not_shadow_nvidia_cuda_python(tmp_path, regular):
    """With the repository root first on sys.path (python run from the root), NVIDIA's
    `cuda` (a regular package in old cuda-python, a namespace package now) still imports."""
    nvidia = tmp_path / "site" / "cuda" / "bindings"
    nvidia.mkdir(parents=True)
    (nvidia / "__init__.py").write_text("ORIGIN = 'nvidia'\n")
    if regular:
        (nvidia.parent / "__init__.py").write_text("")
    code = ("import sys; sys.path[:0] = sys.argv[1:]; import cuda.bindings; "
            "print(cuda.bindings.ORIGIN)")
    out = subprocess.run([sys.executable, "-c", code, str(REPO), str(tmp_path / "site")],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "nvidia"


# ------------------------------------------------------ benchmark and profile

def test_bench_rejects_an_even_mask_with_one_line_and_exit_2():
    out = subprocess.run([sys.executable, str(CUDA_DIR / "bench.py"), "--masks", "3,4"],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip() == ("bench.py: error: argument --masks: mask '4' must be odd "
                                  "and between 1 and 15")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without GPU")
def test_bench_without_a_gpu_says_so_and_exits_1():
    out = subprocess.run([sys.executable, str(CUDA_DIR / "bench.py"), "--sizes", "64"],
                         capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr.strip() == "bench.py: no CUDA device is visible; this benchmark needs an NVIDIA GPU"


def test_bench_seed_draws_another_problem_and_its_range_is_checked(capsys):
    assert bench.parse_args([]).seed == 0 and bench.parse_args(["--seed", "7"]).seed == 7
    image, masks = bench.make_problem(16, 3, 1, "cpu")
    again, _ = bench.make_problem(16, 3, 1, "cpu", seed=0)
    other, _ = bench.make_problem(16, 3, 1, "cpu", seed=7)
    assert torch.equal(image, again) and not torch.equal(image, other)
    with pytest.raises(SystemExit) as caught:
        bench.parse_args(["--seed", "-1"])
    assert caught.value.code == 2
    assert capsys.readouterr().err.strip() == ("bench.py: error: argument --seed: seed '-1' "
                                               "must be from 0 to 2**63-1")


def test_bench_rejects_a_plane_the_kernels_cannot_index_before_looking_for_a_gpu(capsys):
    with pytest.raises(SystemExit) as caught:
        bench.parse_args(["--sizes", "4096,46341"])  # 46341**2 > 2**31 - 1
    assert caught.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "--sizes 46341: a 46341x46341 plane is more than" in err[0]
    assert bench.parse_args(["--sizes", "46340"]).sizes == [46340]


def test_bench_rejects_a_profile_mask_it_does_not_measure():
    with pytest.raises(SystemExit) as caught:
        bench.parse_args(["--masks", "3,5", "--profile", "p.json", "--profile-mask", "7"])
    assert caught.value.code == 2


@pytest.mark.parametrize("flag", ["--json", "--profile"])
def test_bench_refuses_a_folder_for_an_output_file_before_measuring(flag, tmp_path, capsys):
    with pytest.raises(SystemExit) as caught:
        bench.parse_args([flag, str(tmp_path)])
    assert caught.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "is a folder" in err[0]


@pytest.mark.parametrize("flag", ["--json", "--profile"])
def test_bench_refuses_a_name_ending_in_a_slash_or_too_long(flag, tmp_path, capsys):
    (tmp_path / "keep.json").write_text("kept")
    for path, said in ((f"{tmp_path}/keep.json/", "ends in a slash"),
                       (f"{tmp_path}/{'a' * 251}.json", "at most 255 bytes")):
        with pytest.raises(SystemExit) as caught:
            bench.parse_args([flag, path])
        assert caught.value.code == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and said in err[0]
    assert (tmp_path / "keep.json").read_text() == "kept"


@pytest.mark.parametrize("flag", ["--json", "--profile"])
def test_bench_takes_stdout_for_an_output_file(flag):
    # written in place, as conv_profile.write_json does: nothing is made beside it
    assert getattr(bench.parse_args([flag, "/dev/stdout"]), flag[2:]) == "/dev/stdout"


@pytest.mark.parametrize("flag", ["--json", "--profile"])
def test_bench_refuses_an_empty_output_file_name_before_measuring(flag, capsys):
    with pytest.raises(SystemExit) as caught:
        bench.parse_args([flag, ""])
    assert caught.value.code == 2
    assert capsys.readouterr().err.splitlines() == [f"bench.py: error: {flag}: empty file name"]


@pytest.mark.parametrize("flag", ["--json", "--profile"])
def test_bench_refuses_a_dash_for_an_output_file(flag, capsys, tmp_path, monkeypatch):
    # it made a file named "-" in the working folder, where the simulator writes stdout
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as caught:
        bench.parse_args([flag, "-"])
    assert caught.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"bench.py: error: {flag} '-': this command writes files, not stdout; name a file "
        f"(/dev/stdout writes there)"]
    assert not (tmp_path / "-").exists()


def test_bench_output_that_cannot_be_written_after_the_run_is_one_line_and_status_1(
        monkeypatch, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()

    def measure_then_lose_the_folder(args, timer, device):  # the folder goes during the run
        out.rmdir()
        row = bench.result_row("naive", 3, 64, 64, 1, 1e-3, 100.0, 1e-3)
        return 100.0, [row], {("naive", 3, 64): [1e-3]}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "a GPU")
    monkeypatch.setattr(tiledconv, "_import_cupy", lambda: None)
    monkeypatch.setattr(bench, "Timer", lambda *args: None)
    monkeypatch.setattr(bench, "measure", measure_then_lose_the_folder)
    monkeypatch.setattr(bench, "report", lambda *args: {})
    # main sets these flags: put them back by hand (pytest >= 9.2's monkeypatch would undo the
    # cuBLAS one with delattr, which torch's flag object refuses)
    flags = [(torch.backends.cudnn, "benchmark"), (torch.backends.cudnn, "allow_tf32"),
             (torch.backends.cuda.matmul, "allow_tf32")]
    saved = [getattr(owner, name) for owner, name in flags]
    try:
        assert bench.main(["--sizes", "64", "--masks", "3", "--variants", "naive",
                           "--json", str(out / "r.json")]) == 1
    finally:
        for (owner, name), value in zip(flags, saved):
            setattr(owner, name, value)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("bench.py: error: ") and "r.json" in err[0]


def test_result_row_reports_bandwidth_fraction_of_copy_and_speedup():
    row = bench.result_row("register_blocked", 5, 1000, 2000, 1, time_s=0.004, copy_GBps=8.0,
                           conv2d_time_s=0.010)
    assert row == {"variant": "register_blocked", "mask": 5, "height": 1000, "width": 2000,
                   "channels": 1, "time_s": 0.004, "GBps": 4.0, "fraction_of_copy": 0.5,
                   "speedup_vs_conv2d": 2.5}
    assert "| register_blocked | 5x5 | 1000x2000 | 4.000 | 4 | 50% | 2.50x |" in \
        bench.format_table([row])


def test_conv_profile_loads_in_the_simulator_as_per_step_compute(tmp_path):
    from dsgd_sim.workload import load_profile
    path = tmp_path / "profile.json"
    samples = [0.002, 0.003, 0.004]  # a format check, not a measurement
    conv_profile.write_profile(str(path), conv_profile.conv_profile(
        samples, variant="register_blocked", mask_size=5, height=64, width=64, channels=2,
        gpu="test", command="python cuda/bench.py --profile profile.json"))
    assert json.loads(path.read_text())["compute_s"] == samples
    workload = load_profile(str(path))
    assert workload.compute.mean_s == pytest.approx(0.003)
    assert sum(layer.grad_bytes for layer in workload.layers) == 4 * 2 * 5 * 5


RESULT_FILES = sorted(p for p in (CUDA_DIR / "results").glob("*.json")
                      if "results" in json.loads(p.read_text()))


def test_committed_gpu_results_exist():
    assert "h100.json" in [p.name for p in RESULT_FILES]


@pytest.mark.parametrize("path", RESULT_FILES, ids=lambda p: p.name)
def test_committed_gpu_results_keep_the_format_and_their_rows_add_up(path):
    data = json.loads(path.read_text())
    assert data["gpu"].startswith("NVIDIA") and data["copy_GBps"] > 0
    assert data["command"].startswith("python cuda/bench.py")
    conv2d = {(r["mask"], r["height"], r["width"], r["channels"]): r["time_s"]
              for r in data["results"] if r["variant"] == "conv2d"}
    assert conv2d, "no conv2d rows"
    for row in data["results"]:
        shape = (row["mask"], row["height"], row["width"], row["channels"])
        assert row["variant"] in set(tiledconv.VARIANTS) | {"conv2d", "conv2d_tf32"}
        expected = bench.result_row(row["variant"], *shape, time_s=row["time_s"],
                                    copy_GBps=data["copy_GBps"], conv2d_time_s=conv2d[shape])
        assert row.keys() == expected.keys()
        for key, value in expected.items():
            assert row[key] == (value if isinstance(value, str) else pytest.approx(value, rel=1e-9))


def test_committed_gpu_profile_loads_in_the_simulator():
    from dsgd_sim.workload import load_profile
    workload = load_profile(str(CUDA_DIR / "results" / "h100-profile.json"))
    assert workload.name.startswith("conv2d pipelined 5x5")
    assert 1e-4 < workload.compute.mean_s < 1e-3


@pytest.mark.parametrize("samples", [[], [0.001, 0.0], [float("nan")], [True]])
def test_conv_profile_rejects_unusable_samples(samples):
    with pytest.raises(ValueError):
        conv_profile.conv_profile(samples, variant="naive", mask_size=3, height=8, width=8,
                                  channels=1, gpu="test", command="test")


# ------------------------------------------------------------------------ GPU

GPU_SHAPES = [(1, 1), (1, 37), (37, 1), (33, 70), (129, 257), (300, 1003)]


@pytest.fixture
def fp32_conv2d():
    """F.conv2d on the GPU with TF32 off, restoring the flag afterwards."""
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False

    def run(image, mask):
        k = mask.shape[-1]
        if image.dim() == 2:
            return F.conv2d(image[None, None], mask[None, None], padding=k // 2)[0, 0]
        return F.conv2d(image, mask[:, None], padding=k // 2, groups=image.shape[1])
    yield run
    torch.backends.cudnn.allow_tf32 = saved


@needs_gpu
@pytest.mark.parametrize("variant", list(tiledconv.VARIANTS))
def test_gpu_variant_equals_conv2d_on_sizes_off_the_tile_and_masks_to_15(variant, fp32_conv2d):
    gen = torch.Generator(device="cuda").manual_seed(5)
    for height, width in GPU_SHAPES:
        for k in MASK_SIZES:
            image = torch.randn(height, width, device="cuda", generator=gen)
            mask = torch.randn(k, k, device="cuda", generator=gen)
            got = tiledconv.conv2d(image, mask, variant)
            label = f"{variant} {height}x{width} mask {k}"
            assert_matches(got, image, mask, label)
            torch.testing.assert_close(got, fp32_conv2d(image, mask), rtol=1e-4, atol=1e-4,
                                       msg=label)


@needs_gpu
@pytest.mark.parametrize("variant", list(tiledconv.VARIANTS))
def test_gpu_variant_equals_conv2d_on_batched_depthwise_input(variant, fp32_conv2d):
    gen = torch.Generator(device="cuda").manual_seed(6)
    for (n, c, h, w), k in [((3, 5, 33, 67), 3), ((2, 4, 130, 36), 9), ((2, 100, 17, 20), 15)]:
        image = torch.randn(n, c, h, w, device="cuda", generator=gen)
        mask = torch.randn(c, k, k, device="cuda", generator=gen)
        got = tiledconv.conv2d(image, mask, variant)
        label = f"{variant} {n}x{c}x{h}x{w} mask {k}"
        assert_matches(got, image, mask, label)
        torch.testing.assert_close(got, fp32_conv2d(image, mask), rtol=1e-4, atol=1e-4, msg=label)


@needs_gpu
@pytest.mark.parametrize("variant", list(tiledconv.VARIANTS))
def test_gpu_variant_handles_misaligned_views_many_planes_and_side_streams(variant):
    base = torch.randn(70 * 132 + 1, device="cuda")
    image = base[1:].view(70, 132)  # contiguous, but 4 bytes off a 16-byte boundary
    mask = torch.randn(5, 5, device="cuda")
    assert_matches(tiledconv.conv2d(image, mask, variant), image, mask, f"{variant} misaligned")
    planes = torch.randn(70000, 1, 1, 2, device="cuda")  # more planes than gridDim.z allows
    masks = torch.randn(1, 3, 3, device="cuda")
    assert_matches(tiledconv.conv2d(planes, masks, variant), planes, masks, f"{variant} planes")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())  # image and mask were made on the default stream
    with torch.cuda.stream(side):
        got = tiledconv.conv2d(image, mask, variant)
    side.synchronize()
    assert_matches(got, image, mask, f"{variant} on a side stream")


@needs_gpu
def test_gpu_conv2d_rejects_a_mask_on_another_device():
    with pytest.raises(ValueError, match="must be on one device"):
        tiledconv.conv2d(torch.zeros(4, 4, device="cuda"), torch.zeros(3, 3))
