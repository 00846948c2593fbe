"""Errors that the CLI turns into one clear line and an exit code (never a traceback)."""

from __future__ import annotations

from typing import Optional

from p2p_ops.causes import Verdict

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2


class P2POpsError(Exception):
    """`cause`: the catalogue's verdict on why, where one is confirmed (a refusal's --json carries it)."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, *args: object, cause: Optional[Verdict] = None):
        super().__init__(*args)
        self.cause = cause


class BadInput(P2POpsError):
    """The user gave something we cannot use: name the field or value and the fix."""


class CheckFailed(P2POpsError):
    exit_code = EXIT_CHECK_FAILED


class CouldNotRun(P2POpsError):
    """Something outside the input stopped us (a process would not start, a host is unreachable)."""
