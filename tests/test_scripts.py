"""Every tool under ``experiments/`` runs as a script too (``python experiments/grids.py``), as
its usage line names it, not only as a module (``python -m experiments.grids``)."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p for p in (REPO / "experiments").glob("*.py")
                 if 'if __name__ == "__main__":' in p.read_text())


def test_the_experiment_tools_are_found():
    assert {"run.py", "grids.py", "floor.py", "wire_bytes.py"} <= {p.name for p in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_tool_run_as_a_script_prints_its_help(script, tmp_path):
    # from another folder: the script, not the working directory, must find the repository
    done = subprocess.run([sys.executable, str(script), "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:") and "Traceback" not in done.stderr
