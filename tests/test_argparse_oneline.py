"""dsgd_sim/argparse_oneline.py: output paths refused before any work, in one line."""

import json
import os
import subprocess
import sys

import pytest

from dsgd_sim.argparse_oneline import (check_output_dir, check_output_file, check_output_files,
                                       read_json, run_command_line, write_json_output,
                                       write_text_atomically)


def test_a_writable_new_or_existing_file_and_none_pass(tmp_path):
    (tmp_path / "old.json").write_text("{}")
    for path in (None, str(tmp_path / "new.json"), str(tmp_path / "old.json")):
        check_output_file("--json", path)  # raises ValueError if refused
    # checking writes nothing and leaves what is there as it was
    assert os.listdir(tmp_path) == ["old.json"] and (tmp_path / "old.json").read_text() == "{}"


@pytest.mark.parametrize("name, message", [
    ("", "is not a file name"), (".", "is not a file name"),
    ("missing/run.json", "cannot write into"),
])
def test_a_file_that_cannot_be_written_is_refused_naming_flag_and_path(tmp_path, name, message):
    path = str(tmp_path / name) if name else ""
    with pytest.raises(ValueError, match=message) as info:
        check_output_file("--json", path)
    assert str(info.value).startswith(f"--json {path!r}")


def test_an_existing_file_that_cannot_be_written_is_refused(tmp_path, monkeypatch):
    # as root only an immutable file refuses writing: the check is os.access's, faked here
    path = tmp_path / "locked.json"
    path.write_text("{}")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(path)
                        else real_access(p, mode))
    with pytest.raises(ValueError, match="the file exists and cannot be written"):
        check_output_file("--json", str(path))


def test_a_folder_under_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="is not a folder"):
        check_output_dir("--checkpoint-dir", str(tmp_path / "file" / "ckpt"))
    check_output_dir("--checkpoint-dir", str(tmp_path / "new" / "ckpt"))  # made later: passes


def test_a_name_ending_in_a_slash_is_no_file_name_and_never_writes_the_file_before_it(tmp_path):
    (tmp_path / "keep.txt").write_text("precious")
    for path in (tmp_path / "keep.txt", tmp_path / "new"):
        with pytest.raises(ValueError, match="is not a file name"):
            check_output_file("--json", f"{path}/")
        with pytest.raises(IsADirectoryError, match="cannot end in a slash"):
            write_text_atomically(f"{path}/", "{}")
    assert os.listdir(tmp_path) == ["keep.txt"]
    assert (tmp_path / "keep.txt").read_text() == "precious"


def test_the_longest_legal_file_name_is_written_and_a_longer_one_refused(tmp_path):
    longest = tmp_path / ("a" * 250 + ".json")  # 255 bytes: the temporary file beside it too
    check_output_file("--json", str(longest))
    write_text_atomically(longest, "{}")
    assert longest.read_text() == "{}" and os.listdir(tmp_path) == [longest.name]
    with pytest.raises(ValueError, match="a file name here is at most 255 bytes long"):
        check_output_file("--json", str(tmp_path / ("a" * 251 + ".json")))


def test_json_output_is_strict_json_with_null_for_what_is_no_number(tmp_path):
    from dsgd_sim.argparse_oneline import write_json_output
    path = tmp_path / "out.json"
    document = {"speedup": float("nan"), "rates": [1.5, float("inf"), (2, -float("inf"))],
                "name": "x", "n": 3}
    assert write_json_output("prog", "--json", str(path), document) == 0
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"speedup": None, "rates": [1.5, None, [2, None]], "name": "x",
                                "n": 3}


def test_a_folder_where_nothing_can_be_made_is_refused_even_to_root():
    # access() says yes to root everywhere; /proc takes no new file from anyone
    with pytest.raises(ValueError, match=r"--out '/proc/x': cannot write into /proc"):
        check_output_dir("--out", "/proc/x")


def test_an_abbreviated_flag_is_refused_not_taken_for_the_whole_one(capsys):
    from dsgd_sim.argparse_oneline import OneLineArgumentParser
    parser = OneLineArgumentParser(prog="prog")
    parser.add_argument("--updates", type=int)
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["--update", "10"])
    assert info.value.code == 2
    assert capsys.readouterr().err == "prog: error: unrecognized arguments: --update 10\n"


def test_a_value_that_does_not_parse_names_its_flag():
    from dsgd_sim.argparse_oneline import parse_flag
    from dsgd_sim.units import parse_time
    assert parse_flag("--timeout", parse_time, "30s") == 30.0
    with pytest.raises(ValueError, match=r"^--timeout: not a time: 'abc'$"):
        parse_flag("--timeout", parse_time, "abc")


def test_an_output_that_cannot_be_written_after_all_is_one_line_and_status_1(tmp_path, capsys):
    good = tmp_path / "out.json"
    assert write_json_output("bench.py", "--json", str(good), {"rows": [1]}) == 0
    assert json.loads(good.read_text()) == {"rows": [1]}
    gone = tmp_path / "gone" / "out.json"  # its folder removed during the run
    assert write_json_output("bench.py", "--json", str(gone), {"rows": [1]}) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("bench.py: error: --json: ")
    assert write_json_output("bench.py", "--json", None, {}) == 0  # not asked for


def test_an_output_through_a_link_writes_its_target_and_keeps_the_link(tmp_path):
    target, link = tmp_path / "target.json", tmp_path / "link.json"
    link.symlink_to(target)
    write_text_atomically(link, "{}")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "{}"


def test_an_output_on_a_pipe_or_device_is_written_to_not_replaced(tmp_path):
    import stat
    import threading
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    got = []
    reader = threading.Thread(target=lambda: got.append(pipe.read_text()), daemon=True)
    reader.start()
    write_text_atomically(pipe, "through the pipe")
    reader.join(timeout=10)
    assert got == ["through the pipe"] and stat.S_ISFIFO(os.stat(pipe).st_mode)
    write_text_atomically(os.devnull, "gone")  # a character device: still one afterwards
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_an_output_on_an_input_the_run_reads_is_refused(tmp_path):
    source = tmp_path / "profile.json"
    source.write_text("{}")
    with pytest.raises(ValueError, match=r"^--json '.*profile\.json' is the --profile file, "
                                         r"which this run reads"):
        check_output_files({"--json": str(source)}, {"the --profile file": str(source)})
    check_output_files({"--json": str(tmp_path / "out.json")}, {"the --profile file": str(source),
                                                                "an input not given": None})
    assert source.read_text() == "{}"


def test_a_descriptor_of_this_process_is_appended_to_not_replaced(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("earlier lines\n")
    with open(log, "a") as handle:  # as a shell's >> log.txt hands stdout over
        write_text_atomically(f"/dev/fd/{handle.fileno()}", "{}\n")
    assert log.read_text() == "earlier lines\n{}\n"


def test_an_output_through_a_link_to_a_missing_folder_is_refused_before_the_work(tmp_path):
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "no-such-folder" / "out.json")
    with pytest.raises(ValueError, match="cannot write into .*no-such-folder"):
        check_output_file("--json", str(link))


def test_read_json_says_value_error_for_every_file_that_is_not_json(tmp_path):
    """Not JSON, bad UTF-8 and nesting too deep for the parser are all ValueError; a missing
    file is OSError; a document comes back whole."""
    path = tmp_path / "f.json"
    for data, words in [(b"{not json", "Expecting property name"), (b"\xff\xfe[", "codec"),
                        (b"[" * 200_000 + b"]" * 200_000, "nested too deep to read"),
                        (b'{"bytes": -1' + b"0" * 400 + b"}", "integer of 401 digits, too large"),
                        # past Python's 4,300 digits int() would raise a ValueError of its own
                        (b"[1" + b"0" * 5000 + b"]", "integer of 5001 digits, too large")]:
        path.write_bytes(data)
        with pytest.raises(ValueError, match=words):
            read_json(path)
    with pytest.raises(OSError):
        read_json(tmp_path / "missing.json")
    with pytest.raises(OSError, match="larger than 64 MiB"):
        read_json("/dev/zero")  # would never end
    with pytest.raises(OSError, match="larger than 4 bytes"):
        read_json(path, max_bytes=4)
    path.write_text('{"rows": [[1, 2.5, null]]}')
    assert read_json(str(path)) == {"rows": [[1, 2.5, None]]}
    path.write_text("[1" + "0" * 300 + "]")  # large, but a float holds it
    assert read_json(path) == [10 ** 300]


def closed_pipe_stdout(monkeypatch):
    """Make sys.stdout a pipe whose reader has already gone, as ``| head`` leaves it."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    stream = os.fdopen(write_end, "w", buffering=1)
    monkeypatch.setattr(sys, "stdout", stream)
    return stream


def test_a_closed_stdout_drops_the_printing_but_not_the_files(tmp_path, monkeypatch):
    stream = closed_pipe_stdout(monkeypatch)
    out = tmp_path / "figures.json"

    def main():
        for line in range(10_000):
            print(f"row {line}")
        return write_json_output("prog", "--json", str(out), {"rows": 10_000})

    try:
        assert run_command_line(main) == 1  # the printing was cut short
        assert sys.stdout is stream  # given back as it was
    finally:
        stream.close()
    assert json.loads(out.read_text()) == {"rows": 10_000}


@pytest.mark.parametrize("keep_status, status", [(False, 1), (True, 0)])
def test_a_whole_line_into_a_closed_stdout_is_dropped_and_keep_status_keeps_mains(monkeypatch,
                                                                                 keep_status,
                                                                                 status):
    stream = closed_pipe_stdout(monkeypatch)

    def main():
        sys.stdout.write_whole("rank 0 pid 1 role worker\n")  # one write call, as ranks write
        print("and the rest")
        return 0

    try:
        assert run_command_line(main, keep_status=keep_status) == status
    finally:
        stream.close()


def test_a_whole_line_goes_through_a_stdout_with_no_file_behind_it(capsys):
    assert run_command_line(lambda: sys.stdout.write_whole("one line\n") or 0) == 0
    assert capsys.readouterr().out == "one line\n"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_a_full_stdout_is_one_line_and_status_1_and_the_files_still_written(tmp_path,
                                                                            monkeypatch, capsys):
    stream = open("/dev/full", "w")  # every write fails: no space left on device
    monkeypatch.setattr(sys, "stdout", stream)
    out = tmp_path / "figures.json"

    def main():
        print("a table" * 10_000)  # past the buffer: this write reaches the device
        return write_json_output("prog", "--json", str(out), {"rows": 1})

    try:
        assert run_command_line(main, "prog") == 1
    finally:
        stream.close()
    assert capsys.readouterr().err == "prog: error: cannot write stdout: No space left on device\n"
    assert json.loads(out.read_text()) == {"rows": 1}


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_help_into_a_full_stdout_is_one_line_and_status_1(tmp_path):
    # --help ends in SystemExit(0) from argparse, after its print to stdout failed
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "dsgd_sim", "--help"], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr == "dsgd_sim: error: cannot write stdout: No space left on device\n"


def test_a_system_exit_into_a_closed_stdout_is_a_status(monkeypatch, capsys):
    for code, status in ((0, 1), (3, 3), (None, 1), ("no figures", 1)):
        stream = closed_pipe_stdout(monkeypatch)

        def main():
            print("a line" * 10_000)
            sys.exit(code)

        try:
            assert run_command_line(main) == status
        finally:
            stream.close()
    assert capsys.readouterr().err == "no figures\n"  # what sys.exit("...") would have said
    stream = closed_pipe_stdout(monkeypatch)
    try:
        assert run_command_line(lambda: print("a line" * 10_000) or sys.exit(2),
                                keep_status=True) == 2
    finally:
        stream.close()
    monkeypatch.undo()  # stdout as the test began
    with pytest.raises(SystemExit) as stop:  # stdout written (or never used): as it was
        run_command_line(lambda: sys.exit(2))
    assert stop.value.code == 2


def test_an_open_stdout_passes_main_through(capsys):
    assert run_command_line(lambda: print("all of it") or 3) == 3
    assert run_command_line(lambda: None) is None  # sys.exit(None) is status 0
    assert capsys.readouterr().out == "all of it\n"


def test_every_flag_of_every_entry_point_says_what_it_does_in_its_help():
    # read from the source, so that no entry point is left out: an add_argument call without
    # help= shows a bare flag in --help (eleven of async_ps.py's did)
    import ast
    from pathlib import Path
    repo = Path(__file__).resolve().parent.parent
    sources = [p for folder in ("dsgd_sim", "real", "experiments", "benchmarks", "cuda")
               for p in sorted((repo / folder).rglob("*.py"))]
    bare = [f"{path.relative_to(repo)}:{node.lineno}"
            for path in sources for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"
            and not any(keyword.arg == "help" for keyword in node.keywords)]
    assert len(sources) > 50 and bare == []
