"""User-facing errors: each names the problem and carries the exit code the CLI returns."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    USAGE = 2
    BAD_MODEL = 3          # unreadable, malformed, fails the checker, missing external data
    UNSUPPORTED = 4        # ops or attributes korch cannot fission
    SHAPE = 5              # symbolic/unknown dims, bad --input-shape, non-static values
    VERIFY = 6             # result disagrees with onnxruntime
    IO = 7                 # cannot write the output
    CACHE = 8              # profile database unreadable, corrupt, newer schema, or cache dir unwritable
    RUN = 9                # a plan's kernel raised at run time (e.g. an index out of range in the feeds)


class KorchError(Exception):
    """Base class: a problem the user can act on. The message is shown as-is, without a traceback."""

    exit_code: ExitCode = ExitCode.USAGE


class UsageError(KorchError):
    """A bad command-line value or API argument."""

    exit_code = ExitCode.USAGE


class ModelLoadError(KorchError):
    exit_code = ExitCode.BAD_MODEL


class UnsupportedError(KorchError):
    exit_code = ExitCode.UNSUPPORTED


class ShapeError(KorchError):
    exit_code = ExitCode.SHAPE


class VerificationError(KorchError):
    exit_code = ExitCode.VERIFY


class OutputError(KorchError):
    exit_code = ExitCode.IO


class UnknownModelError(KorchError):
    """A zoo name that does not exist."""

    exit_code = ExitCode.USAGE
