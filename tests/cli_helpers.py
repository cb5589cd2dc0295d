"""What the tests of command-line entry points share."""

import pytest


def usage_error(main, argv: list[str], capsys) -> str:
    """The message of ``main(argv)``'s usage error, after checking that it exits with status 2
    and says it on one line."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    return err
