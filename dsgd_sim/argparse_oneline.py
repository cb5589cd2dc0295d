"""The project's command lines share one rule: a bad argument is one line on stderr and exit 2."""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import stat
import sys
import tempfile
from typing import Callable


class OneLineArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line, ``PROG: error: MESSAGE``, and exit
    status 2 (argparse's own status), without the usage block that argparse prints first."""

    def __init__(self, *args, **kwargs):
        # no abbreviated flags: one entry point reads argv for a flag given (async_ps.py's
        # --updates), and "--update" must not be taken for it silently
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        return super().parse_known_args(self._attach_negative_values(args), namespace)

    def _attach_negative_values(self, argv: list[str]) -> list[str]:
        """Turn ``--latency -1ms`` into ``--latency=-1ms``, so that the bad value is reported
        (argparse alone takes ``-1ms`` for an unknown option and names no value)."""
        takes_value = {opt for action in self._actions if action.nargs is None
                       for opt in action.option_strings}
        out: list[str] = []
        for token in argv:
            if out and out[-1] in takes_value and token[:1] == "-" and token[1:2] in "0123456789.in":
                out[-1] = f"{out[-1]}={token}"
            else:
                out.append(token)
        return out


def argparse_type(parse, what: str):
    """An argparse ``type`` from a parser that raises ``ValueError`` (units, counts, ...): its
    message, which names the bad text, becomes argparse's one-line error."""
    def convert(text: str):
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    convert.__name__ = what
    return convert


MAX_SEED = 2**63 - 1  # numpy's and torch's generators take 64-bit seeds


def parse_seed(text: str) -> int:
    """A ``--seed``: a whole number from 0 to ``MAX_SEED`` (``ValueError`` naming the text
    else); with ``argparse_type(parse_seed, "seed")`` a bad one is argparse's one line."""
    try:
        seed = int(text)
    except ValueError:
        raise ValueError(f"seed {text!r} is not a whole number") from None
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed {text!r} must be from 0 to 2**63-1")
    return seed


def parse_flag(flag: str, parse, text):
    """``parse(text)``, its ``ValueError`` naming the flag (``--timeout: not a time: 'abc'``)."""
    try:
        return parse(text)
    except ValueError as error:
        raise ValueError(f"{flag}: {error}") from None


MAX_INPUT_BYTES = 64 << 20  # an input file (a profile, a round-cost table) larger is not one


def read_input_text(path: str, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The text of the input file ``path`` (a file, or a pipe such as ``<(cat f)``, which is
    read as it comes, and waited for as any Unix tool waits). ``OSError`` (its ``strerror``
    says why) where it cannot be read or holds more than ``max_bytes`` (``/dev/zero`` would
    never end)."""
    if os.path.isdir(path):
        raise OSError(errno.EISDIR, "is a folder", path)
    with open(path, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        limit = (f"{max_bytes >> 20} MiB" if max_bytes and max_bytes % (1 << 20) == 0
                 else f"{max_bytes:,} bytes")
        raise OSError(errno.EFBIG, f"larger than {limit}", path)
    return data.decode()


class _IntegerTooLarge(ValueError):
    def __init__(self, digits: str):
        super().__init__(digits)
        self.digits = digits


def _float_sized_int(digits: str) -> int:
    """A JSON integer, refused where no float holds it: every figure this project reads is used
    as a float somewhere, and ``float()`` of such an integer raises ``OverflowError``. The text
    is read as a float first, which is infinite exactly there, and has no digit limit, where
    ``int()`` of more than 4,300 digits raises a ``ValueError`` of its own."""
    if math.isinf(float(digits)):
        raise _IntegerTooLarge(digits)
    return int(digits)


def read_json(path, max_bytes: int = MAX_INPUT_BYTES) -> object:
    """The JSON document in file ``path``: ``OSError`` where it cannot be read or holds more
    than ``max_bytes`` (``read_input_text``: ``/dev/zero`` would never end), ``ValueError``
    where it is not UTF-8 (a ``UnicodeDecodeError``), not JSON, nested too deep for the parser
    (the parser itself would raise ``RecursionError``) or holds an integer too large for a
    float (a ``json.JSONDecodeError`` for these three)."""
    text = read_input_text(os.fspath(path), max_bytes)
    try:
        return json.loads(text, parse_int=_float_sized_int)
    except RecursionError:
        raise json.JSONDecodeError("nested too deep to read", text, 0) from None
    except _IntegerTooLarge as error:
        raise json.JSONDecodeError(f"an integer of {len(error.digits.lstrip('-'))} digits, too "
                                   f"large for a float", text, max(text.find(error.digits), 0)) from None


def check_output_file(flag: str, path: str | None) -> None:
    """Refuse an output file that cannot be written, before any work is done: ``ValueError``
    naming the flag and the path. ``None`` (not asked for) passes; ``-`` is refused, not made a
    file of that name: only the simulator reads it as stdout, and passes None for it."""
    if path is None:
        return
    if path == "-":
        raise ValueError(f"{flag} '-': this command writes files, not stdout; name a file "
                         f"(only python -m dsgd_sim --json - writes to stdout)")
    if not path or os.path.isdir(path) or path.endswith(os.sep):  # "out/": a folder's name
        raise ValueError(f"{flag} {path!r} is not a file name")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise ValueError(f"{flag} {path!r}: the file exists and cannot be written")
    if _written_in_place(path):  # a device or a pipe: nothing is made beside it
        return
    parent = os.path.dirname(os.path.realpath(path))  # through a link: its target's folder
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        raise ValueError(f"{flag} {path!r}: cannot write into {parent}")
    name_max = os.pathconf(parent, "PC_NAME_MAX")
    if len(os.fsencode(os.path.basename(os.path.realpath(path)))) > name_max:
        raise ValueError(f"{flag} {path!r}: a file name here is at most {name_max} bytes long")
    _try_writing_into(flag, path, parent)  # beside it, as the output will be written


def _try_writing_into(flag: str, path: str, folder: str) -> None:
    """Make and remove a file in ``folder``, where ``path`` will be written: root passes every
    access() check, so only a try shows a folder nobody can write into (``/proc``); ValueError
    naming ``flag`` and ``path`` if it fails."""
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-check-")
    except OSError as error:
        raise ValueError(f"{flag} {path!r}: cannot write into {folder} "
                         f"({error.strerror})") from None
    os.close(fd)
    os.unlink(probe)


def check_output_files(outputs: dict[str, str | None],
                       inputs: dict[str, str | None] | None = None) -> None:
    """``check_output_file`` for each ``{flag: path}``, no two outputs on one path (the one
    written last would replace the other), and no output on one of ``inputs`` (``{what: path}``
    of the files the run reads, which it would overwrite; ``what`` names it in the message)."""
    seen: dict[str, str] = {}
    for flag, path in outputs.items():
        check_output_file(flag, path)
        if path is None:
            continue
        key = os.path.realpath(path)
        if key in seen:
            raise ValueError(f"{seen[key]} and {flag} name the same file {path!r}")
        seen[key] = flag
    for what, path in (inputs or {}).items():
        output = seen.get(os.path.realpath(path)) if path is not None else None
        if output:
            raise ValueError(f"{output} {os.fspath(path)!r} is {what}, which this run reads: "
                             f"writing it would overwrite it")


def write_atomically(path: str, write: Callable, binary: bool = False) -> None:
    """Call ``write(handle)`` on a new file beside ``path``, then put it in ``path``'s place:
    a write that fails (a full disk, a size limit) leaves what was there whole, never a file cut
    short. A link is followed (its target is written); a device, a pipe or a descriptor of this
    process (``/dev/null``, ``/dev/stdout``) is written to in place. ``OSError`` naming ``path``
    if it cannot be written."""
    given = os.fspath(path)
    if given.endswith(os.sep):  # realpath would drop the slash and write another file
        raise IsADirectoryError(errno.EISDIR, "a file name cannot end in a slash", given)
    if _written_in_place(given):  # appended to: /dev/stdout may be a log opened with >>
        with open(given, "ab" if binary else "a") as handle:
            write(handle)
        return
    path = os.path.realpath(given)  # through a link: its target, the link kept
    folder, name = os.path.split(path)
    try:
        # the name cut short: with its prefix and suffix it must still be a legal name
        fd, part = tempfile.mkstemp(dir=folder, prefix=f".{name[:64]}.", suffix=".part")
    except OSError as error:  # named for the output asked for, not the file beside it
        raise OSError(error.errno, error.strerror, given) from None
    try:
        with os.fdopen(fd, "wb" if binary else "w") as handle:
            write(handle)
        mode = os.stat(path).st_mode & 0o777 if os.path.exists(path) else 0o666 & ~_umask()
        os.chmod(part, mode)  # mkstemp makes its file private; an output keeps the usual mode
        os.replace(part, path)
    except BaseException:
        if os.path.exists(part):
            os.unlink(part)
        raise


def _written_in_place(path: str) -> bool:
    """Whether ``path`` is written to where it is, not replaced by a new file: a device, a pipe
    (one nobody reads waits for a reader, as with any Unix tool), or this process's own file
    descriptors (``/dev/stdout``, ``/dev/fd/N``)."""
    if os.fspath(path).startswith(("/dev/std", "/dev/fd/", "/proc/self/fd/")):
        return True
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:  # not there yet (or a link to nowhere): a new file
        return False


def write_text_atomically(path, text: str) -> None:
    """``path``'s text is ``text``, or what it was before where the write fails."""
    write_atomically(path, lambda handle: handle.write(text))


def save_figure(figure, path, **options) -> None:
    """``figure.savefig(path, **options)``, written atomically (``write_atomically``)."""
    image_format = os.path.splitext(os.fspath(path))[1].lstrip(".").lower() or None
    write_atomically(path, lambda handle: figure.savefig(handle, format=image_format,
                                                         **options), binary=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json_output(prog: str, flag: str, path: str | None, document, indent: int = 1) -> int:
    """Write ``document`` as JSON to ``path`` (None: not asked for) and return 0; where it cannot
    be written after all (a full disk, a folder gone during the run), one line
    ``PROG: error: FLAG: ...`` on stderr and 1: the figures were printed before."""
    if path is None:
        return 0
    try:
        write_atomically(path, lambda handle: json.dump(finite_json(document), handle,
                                                        indent=indent, allow_nan=False))
        return 0
    except OSError as error:
        print(f"{prog}: error: {flag}: {error}", file=sys.stderr)
        return 1


def _send_to_devnull(stream) -> None:
    """Point ``stream``'s file descriptor at /dev/null: what it still buffers, and Python's own
    flush at exit, then go nowhere instead of failing again with a traceback."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, stream.fileno())
    os.close(devnull)


def write_whole(stream, text: str) -> None:
    """``text`` after what ``stream`` buffers, in one write call to its file descriptor where it
    has one, so that lines from several processes sharing a pipe never interleave (``print``
    writes the text and its newline separately)."""
    stream.flush()
    try:
        fd = stream.fileno()
    except (AttributeError, OSError):  # no file behind it (captured, redirected)
        stream.write(text)
        stream.flush()
        return
    os.write(fd, text.encode())


class _StdoutUntilClosed:
    """Stands in for ``sys.stdout``: once a write to it fails (its reader gone after ``| head``
    has read its lines, or a full disk), the rest of what is printed is dropped, so that the
    command still writes its files; ``lost`` is the error that stopped it."""

    def __init__(self, stream):
        self.stream = stream
        self.lost: OSError | None = None

    def _guarded(self, call, *args) -> None:
        if self.lost is None:
            try:
                call(*args)
            except OSError as error:
                self.lost = error
                _send_to_devnull(self.stream)

    def write(self, text: str) -> int:
        self._guarded(self.stream.write, text)
        return len(text)

    def flush(self) -> None:
        self._guarded(self.stream.flush)

    def write_whole(self, text: str) -> None:
        """``write_whole`` through this stand-in: dropped once the stream is lost."""
        self._guarded(write_whole, self.stream, text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def run_command_line(main: Callable[[], int | None], prog: str | None = None,
                     keep_status: bool = False) -> int | None:
    """Run a command line's ``main`` and return its exit status. Where the reader of stdout closes
    it early (piped into ``head``), the rest of the printing is dropped without a traceback, the
    files asked for are still written, and the status is 1 if ``main``'s was 0. Where stdout
    cannot be written for another reason (a full disk), the same, and one line
    ``PROG: error: cannot write stdout: ...`` on stderr. With ``keep_status`` the status is
    ``main``'s whatever became of stdout: a rank of a job must not fail for it, since a failing
    rank ends the others (``real.local_launch.self_launch``), perhaps before rank 0 has
    written its report. A ``SystemExit`` from ``main`` (``--help``, ``sys.exit``) is raised again
    where stdout took everything; where it did not, its code is the status as above (None and 0
    as 0), and a message (``sys.exit("...")``) goes to stderr with status 1."""
    guard = _StdoutUntilClosed(sys.stdout)
    sys.stdout = guard
    stop = None
    try:
        status = main()
    except SystemExit as exit_:
        stop, status = exit_, exit_.code
    finally:
        guard.flush()
        sys.stdout = guard.stream
    if guard.lost is None:
        if stop is not None:
            raise stop
        return status
    if not isinstance(guard.lost, BrokenPipeError):  # a closed pipe is the reader's choice
        print(f"{prog or _program_name()}: error: cannot write stdout: "
              f"{guard.lost.strerror or guard.lost}", file=sys.stderr)
    if isinstance(status, str):  # sys.exit("message"): Python would print it and exit 1
        print(status, file=sys.stderr)
        status = 1
    return status if keep_status else status or 1


def _program_name() -> str:
    """``experiments.grids`` for ``python -m experiments.grids``, ``sync.py`` for a script."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:
        return spec.name.removesuffix(".__main__")
    return os.path.basename(sys.argv[0])


def finite_json(value):
    """``value`` with every NaN or infinite float made None (null): JSON has no such numbers, and
    a strict parser refuses the NaN and Infinity that Python's json module writes for them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def check_output_dir(flag: str, path: str | None) -> None:
    """Refuse an output folder that cannot be made or written into, before any work is done:
    ``ValueError`` naming the flag and the path. ``None`` (not asked for) passes."""
    if path is None:
        return
    if not path:
        raise ValueError(f"{flag} {path!r} is not a folder name")
    existing = os.path.abspath(path)
    while not os.path.exists(existing):  # the folder, or the nearest parent it would be made in
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ValueError(f"{flag} {path!r}: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path!r}: cannot write into {existing}")
    _try_writing_into(flag, path, existing)  # as the folder or its files will be
