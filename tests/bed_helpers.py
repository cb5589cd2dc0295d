"""What the tests that build test beds share: the skip marker for machines where network
namespaces cannot be made (no root, no iproute2), with the reason stated, and the steps of a
host's ``real/testbed/sequence.py`` command."""

import shlex

import pytest

from real.testbed.network import unavailable_reason

NAMESPACES_UNAVAILABLE = unavailable_reason()
needs_namespaces = pytest.mark.skipif(NAMESPACES_UNAVAILABLE is not None,
                                      reason=f"cannot make namespaces: {NAMESPACES_UNAVAILABLE}")


def sequence_steps(command: str) -> list[str]:
    """The steps (``SCRIPT ARGS``) of a host command that runs ``real/testbed/sequence.py``
    (``experiments.measure.sequence_command``); AssertionError for any other command."""
    words = shlex.split(command)
    starts = [i for i, word in enumerate(words) if word.endswith("real/testbed/sequence.py")]
    assert len(starts) == 1, f"not one sequence.py command: {command!r}"
    return words[starts[0] + 1:]
