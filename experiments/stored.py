"""Reading a stored run's files (``experiments/results/*``) for the tools that price them again
(``emulated_steps``, ``notice_rows``, ``update_gaps``, ``floor``): a file not as
``experiments/run.py`` writes it is a ``StoredRunError`` naming the file and saying what is
wrong, on one line."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from dsgd_sim.argparse_oneline import read_json
from experiments.report import check_result
from experiments.run_header import check_calibration, run_record

# what reading or pricing a stored file not as experiments/run.py writes it raises
READ_ERRORS = (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError,
               ArithmeticError, RecursionError)


class StoredRunError(ValueError):
    """A stored run's folder or file not as experiments/run.py writes it: the message names the
    file (none: the folder) and says what is wrong, on one line."""


def what_is_wrong(error: BaseException) -> str:
    """One line saying what ``error``, raised reading or pricing a stored file, found wrong."""
    if isinstance(error, FileNotFoundError):
        return "no such file"
    if isinstance(error, OSError):
        return error.strerror or str(error)
    if isinstance(error, KeyError):
        return f"missing key {error}"
    if isinstance(error, json.JSONDecodeError):
        return f"not JSON ({error})"
    if isinstance(error, ValueError):
        return " ".join(str(error).split())
    return f"not as experiments/run.py writes it ({' '.join(str(error).split())})"


@contextlib.contextmanager
def stored_file(name: str):
    """Turn what reading or pricing the stored file ``name`` raises into a StoredRunError
    naming it."""
    try:
        yield
    except StoredRunError:
        raise
    except READ_ERRORS as error:
        raise StoredRunError(f"{name}: {what_is_wrong(error)}") from None


def check_folder(folder: Path) -> None:
    """StoredRunError unless ``folder`` is a folder."""
    if not folder.is_dir():
        raise StoredRunError("no such folder" if not folder.exists() else "not a folder")


def stored_calibration(folder: Path, name: str = "run.json") -> list[dict]:
    """The calibration records of the stored run in ``folder``: run.json's ``calibration`` (or
    ``name``: calibration.json, the list itself), checked (``run_header.check_calibration``);
    StoredRunError naming the file where it is not as experiments/run.py writes it."""
    check_folder(folder)
    with stored_file(name):
        document = read_json(folder / name)
        if name == "run.json":
            document = run_record(document)["calibration"]
        check_calibration(document)
        return document


def stored_result(path: Path, one_row_a_point: bool = False) -> dict:
    """The stored result of experiment ``path.stem`` in file ``path``: StoredRunError naming it
    where the report could not be made from it (``report.check_result``), or where
    ``one_row_a_point`` and it has not a row for each point."""
    with stored_file(path.name):
        result = read_json(path)
        check_result(result, path.stem)
        if one_row_a_point and len(result["points"]) != len(result["rows"]):
            raise ValueError(f"it has {len(result['points'])} points and {len(result['rows'])} "
                             "rows, where a run writes a row for each point")
        return result
