#!/usr/bin/env bash
# Installs dsgd and everything it needs into the current Python environment.
#
#   ./install.sh            the package (simulator and real trainers)
#   ./install.sh mpi        + mpi4py and mpich (a working mpiexec)
#   ./install.sh dev        + what the tests and the experiments need: pytest, NVRTC, mpi4py and mpich
#                             (MPI), ninja; as root with apt-get: iproute2 (the test bed), and a
#                             C++ compiler and Python's headers where missing (the C++ ring rounds)
#
# A torch that is already installed is kept. When there is none, the CPU build is installed
# (TORCH_SPEC, default torch==2.13.0), so that the plain requirement in pyproject.toml never
# downloads the several-GB CUDA build by accident: PyPI's Linux torch is the CUDA build, so the
# CPU one comes from PyTorch's CPU wheel index (TORCH_INDEX_URL; empty: pip's own sources only)
# where that index can be reached.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
extras=""
for arg in "$@"; do
    case "$arg" in
        dev) extras="dev,mpi" ;;
        mpi) extras="${extras:+$extras,}mpi" ;;
        *) echo "install.sh: unknown argument '$arg' (expected: dev or mpi)" >&2; exit 2 ;;
    esac
done

if ! "$PY" -c 'import torch' 2>/dev/null; then
    spec=${TORCH_SPEC:-torch==2.13.0}
    index=${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}
    from=()
    if [[ -n "$index" ]] && "$PY" -c 'import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=10).close()' "$index" 2>/dev/null; then
        from=(--extra-index-url "$index")  # its +cpu build outranks PyPI's of the same version
        echo "install.sh: no torch found; installing $spec (CPU) from $index"
    else
        echo "install.sh: no torch found; installing $spec from pip's own sources" \
             "(${index:-TORCH_INDEX_URL is empty}${index:+ cannot be reached}; on Linux, PyPI's" \
             "torch is the CUDA build)"
    fi
    "$PY" -m pip install -q ${from[@]+"${from[@]}"} "$spec"
fi

"$PY" -m pip install -q -e ".${extras:+[$extras]}"

# The network test bed (real/testbed/) needs iproute2's `ip` and `tc`; the experiments' C++
# ring rounds (experiments/engine_rounds.py, built at first use) need a C++ compiler.
if [[ -n "$extras" && "$extras" == *dev* ]]; then
    missing=()
    command -v tc >/dev/null 2>&1 || missing+=(iproute2)
    command -v c++ >/dev/null 2>&1 || missing+=(g++)
    "$PY" -c 'import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(
        sysconfig.get_paths()["include"], "Python.h")))' || missing+=(python3-dev)
    if [[ ${#missing[@]} -gt 0 ]]; then
        if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
            if ! { apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; }; then
                echo "install.sh: apt-get could not install ${missing[*]} (needed by the test bed" \
                     "and the C++ ring rounds); install them and run this again" >&2
                exit 1
            fi
        else
            echo "install.sh: ${missing[*]} not found: test-bed tests (iproute2) and the C++ ring" \
                 "rounds (g++, python3-dev) cannot run" >&2
        fi
    fi
fi
