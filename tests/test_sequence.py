"""real/testbed/sequence.py: scripts one after another, each in a process forked from one
interpreter that imported torch once, as ``python A && python B`` would run them."""

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from dist_helpers import run_script

REPO = Path(__file__).resolve().parent.parent
SEQUENCE = REPO / "real" / "testbed" / "sequence.py"

REPORT = """\
import json, os, sys
record = {"argv": sys.argv, "name": __name__, "path0": sys.path[0], "pid": os.getpid(),
          "torch_imported": "torch" in sys.modules}
with open(sys.argv[1], "w") as f:
    json.dump(record, f)
print("wrote", os.path.basename(sys.argv[1]))
"""


def sequence(*steps: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SEQUENCE), *steps], cwd=REPO, text=True,
                          capture_output=True, timeout=timeout_s)


def script(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def test_each_step_runs_as_its_own_main_with_its_own_argv_and_torch_already_imported(tmp_path):
    report = script(tmp_path, "report.py", REPORT)  # imports nothing of torch itself
    outs = [tmp_path / "one.json", tmp_path / "two words.json"]
    run = sequence(*(shlex.join([str(report), str(out), "extra"]) for out in outs))
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["wrote one.json", "wrote two words.json"]
    records = [json.loads(out.read_text()) for out in outs]
    for record, out in zip(records, outs):
        assert record["argv"] == [str(report), str(out), "extra"]
        assert record["name"] == "__main__" and record["path0"] == str(tmp_path)
        assert record["torch_imported"] is True
    assert records[0]["pid"] != records[1]["pid"]  # a process each


def test_the_first_failing_step_stops_the_rest_with_its_status(tmp_path):
    mark = tmp_path / "ran"
    touch = script(tmp_path, "touch.py", "import sys\nopen(sys.argv[1], 'a').write('x')\n")
    fail = script(tmp_path, "fail.py", "import sys\nsys.exit(int(sys.argv[1]))\n")
    run = sequence(f"{touch} {mark}", f"{fail} 3", f"{touch} {mark}")
    assert run.returncode == 3 and mark.read_text() == "x"  # the third step never ran
    assert sequence(f"{fail} 0", f"{touch} {mark}").returncode == 0
    assert mark.read_text() == "xx"


def test_a_step_killed_by_a_signal_gives_128_plus_it_as_a_shell_does(tmp_path):
    kill = script(tmp_path, "kill.py", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    assert sequence(str(kill)).returncode == 128 + signal.SIGKILL


def test_a_steps_error_and_exit_message_are_what_python_would_print(tmp_path):
    boom = script(tmp_path, "boom.py", "def f():\n    raise RuntimeError('boom')\nf()\n")
    run = sequence(str(boom))
    assert run.returncode == 1
    assert run.stderr.rstrip().endswith("RuntimeError: boom")
    frames = [line.strip() for line in run.stderr.splitlines() if line.strip().startswith("File")]
    assert frames == [f'File "{boom}", line 3, in <module>', f'File "{boom}", line 2, in f']
    message = script(tmp_path, "message.py", "import sys\nsys.exit('no data here')\n")
    run = sequence(str(message))
    assert (run.returncode, run.stderr) == (1, "no data here\n")


def test_bad_steps_are_one_line_and_status_2_with_nothing_run(tmp_path):
    mark = tmp_path / "ran"
    touch = script(tmp_path, "touch.py", "import sys\nopen(sys.argv[1], 'a').write('x')\n")
    first = f"{touch} {mark}"
    for bad, named in [(f"{tmp_path}/missing.py", "no script"), (f"{touch} 'open", "closing"),
                       ("", "an empty step")]:
        run = sequence(first, bad)
        assert run.returncode == 2 and not mark.exists(), (bad, run.stderr)
        assert run.stderr.count("\n") == 1 and "sequence.py: error:" in run.stderr
        assert named in run.stderr
    run = sequence()
    assert run.returncode == 2 and run.stderr.count("\n") == 1


def test_two_process_groups_one_after_another_in_forks_of_one_interpreter(tmp_path):
    """Every rank runs the benchmark twice through one sequence: each step makes and ends its
    own process group at the same address, as separate ``python`` runs would."""
    steps = [shlex.join(["real/allreduce.py", "--sizes", "4KB", "--algorithms", "ring,backend",
                         "--iters", "2", "--warmup", "1", "--threads", "1", "--json",
                         str(tmp_path / f"{name}.json")])
             for name in ("first", "second")]
    run = run_script([str(SEQUENCE), *steps], world_size=2)
    assert run.returncode == 0, run.stderr
    for name in ("first", "second"):
        results = json.loads((tmp_path / f"{name}.json").read_text())["results"]
        assert {r["algorithm"] for r in results} == {"ring", "backend"}
        assert all(r["time_s"] > 0 for r in results)


def test_sigterm_to_the_sequence_stops_its_step_and_the_steps_after(tmp_path):
    mark, started = tmp_path / "ran", tmp_path / "started"
    wait = script(tmp_path, "wait.py", f"import time\nopen({str(started)!r}, 'w').close()\n"
                                        "time.sleep(60)\n")
    touch = script(tmp_path, "touch.py", "import sys\nopen(sys.argv[1], 'a').write('x')\n")
    process = subprocess.Popen([sys.executable, str(SEQUENCE), str(wait), f"{touch} {mark}"],
                               cwd=REPO, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)  # the sequence alone, not its process group
    assert process.wait(timeout=30) == 128 + signal.SIGTERM, process.stderr.read()
    assert started.exists() and not mark.exists()


def test_a_sequence_command_runs_through_the_test_beds_placeholders_and_shell(tmp_path):
    from experiments.measure import script_step, sequence_command
    from real.testbed.launch import substitute
    report = script(tmp_path, "report.py", REPORT)
    steps = [script_step(str(report), [], None) + " {out}/" + name for name in ("a.json", "b.json")]
    command = substitute(sequence_command(steps), {"rank": 1, "hosts": 2, "out": str(tmp_path)})
    run = subprocess.run(["sh", "-c", command], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    for name in ("a.json", "b.json"):
        assert json.loads((tmp_path / name).read_text())["argv"] == [str(report),
                                                                      f"{tmp_path}/{name}"]
