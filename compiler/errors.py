"""The one exception family of the compiler, and how its errors are printed.

Every problem a user can fix is a `RtcError`. The CLI maps them to exit codes in one place
(`rtc.cli`): 1 for an invalid card or stale output, 2 for usage errors.
"""

from __future__ import annotations

from dataclasses import dataclass


class RtcError(Exception):
    """A problem the user can fix; the message says how."""

    exit_code = 1


class UsageError(RtcError):
    """The command was called wrongly (a missing file, a bad option)."""

    exit_code = 2


@dataclass(frozen=True, order=True)
class Problem:
    """One problem in a card, located at `file:line:col` and naming the field it concerns."""

    file: str
    line: int
    col: int
    field: str
    message: str

    def __str__(self) -> str:
        field = self.field or "(card)"
        return f"{self.file}:{self.line}:{self.col}: {field}: {self.message}"


class CardError(RtcError):
    """A card has one or more problems; all of them are reported at once."""

    def __init__(self, problems: list[Problem]):
        self.problems = sorted(problems)
        super().__init__("\n".join(str(p) for p in self.problems))
