"""Error types. Every error the tool raises on purpose derives from :class:`RmsnormEpsError`.

The CLI turns any of them into exit code 2 and a one-line message; nothing else is
allowed to escape as a traceback unless ``--debug`` is given.
"""

from __future__ import annotations

import reprlib

from rmsnorm_eps.escape import line

_BRIEF = reprlib.Repr()
_BRIEF.maxstring = 80
_BRIEF.maxother = 80
_BRIEF.maxlong = 40
_BRIEF.maxlevel = 3


def brief(value: object) -> str:
    """A repr of ``value`` cut to a few dozen characters, for error messages.

    Bounded in time and size whatever the value is: a YAML alias bomb is a list of a billion
    shared references whose full repr would never finish.
    """
    return _BRIEF.repr(value)


class RmsnormEpsError(Exception):
    """Base class: a problem with the user's input, parameters or files (exit code 2)."""


class InvalidParameterError(RmsnormEpsError, ValueError):
    """A numeric parameter is outside its domain (eps <= 0, delta not in (0, 1), q < 0, ...)."""


class InvalidInput(InvalidParameterError):
    """What :func:`rmsnorm_eps.check` raises for any bad argument (``rmsnorm_eps.InvalidInput``,
    a :class:`ValueError`): ``argument`` names it (``eps``, ``eps['layer']``, ``data``,
    ``data['layer']``, ``delta``, ...) and ``problem`` says what is wrong with it."""

    def __init__(self, argument: str, problem: str) -> None:
        super().__init__(f"{argument}: {problem}")
        self.argument = argument
        self.problem = problem


class InputFileError(RmsnormEpsError):
    """A file cannot be read, is malformed, or holds data of the wrong kind.

    The message always names the file (and the member/key inside it when there is one).
    """

    def __init__(self, path: object, problem: str, *, key: str | None = None) -> None:
        # path and key come from the input: shown inert and bounded (rmsnorm_eps.escape)
        where = line(path) if key is None else f"{line(path)} [{line(key)}]"
        super().__init__(f"{where}: {problem}")
        self.path = str(path)
        self.key = key
        self.problem = problem


class ConfigError(RmsnormEpsError):
    """A normalization config is invalid, ambiguous or incomplete."""


class MissingExtraError(RmsnormEpsError):
    """An optional dependency is needed for this feature but is not installed."""

    def __init__(self, package: str, extra: str, feature: str) -> None:
        # rmsnorm-eps is installed from its repository (no package index carries it), so the
        # extra is installed from the clone; README "Install" gives the git URL form too.
        super().__init__(
            f"{feature} needs the '{package}' package: install the [{extra}] extra from the "
            f"rmsnorm-eps clone: pip install -e '.[{extra}]'"
        )
        self.package = package
        self.extra = extra
