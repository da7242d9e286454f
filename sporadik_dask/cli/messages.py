"""What a shell user reads when something goes wrong: one line naming the command's flags.

An error becomes one line (a full disk, a permission or an object store's refusal named in plain
words, with what to do), and a Python argument it names is spelled as the flag behind it.
"""

from __future__ import annotations

import argparse
import errno
import re
import sys
from collections.abc import Callable
from typing import Any

from sporadik_dask.format.errors import SporadikError

__all__ = [
    "FLAGS",
    "damaged_input_errors",
    "in_flags",
    "object_store_advice",
    "object_store_errors",
    "one_line",
    "one_line_warning",
    "os_error_line",
]


#: Python arguments named in messages, and the flags that set them here.
FLAGS: dict[str, str | Callable[[re.Match[str]], str]] = {
    r"\bshape=\(([^)]*)\)": lambda found: (
        "--shape " + " ".join(part.strip() for part in found.group(1).split(",") if part.strip())
    ),
    r"\boverwrite=True\b": "--overwrite",
    r"\bbyte_addressable=True\b": "--byte-addressable",
    r"\bstorage_options\b": "--storage-options",
    r"\b(shape|columns|values|chunk|shard|axes|codecs|dtype)=(?=[\s:;,.)]|$)": r"--\1",
    r"\b(shape|columns|values|chunk|shard|axes|codecs|dtype)=": r"--\1 ",
}


def in_flags(message: str) -> str:
    """``message`` with the Python arguments it names spelled as this command's flags."""
    for pattern, flag in FLAGS.items():
        message = re.sub(pattern, flag, message)
    return message


#: Errors of the file system a shell user acts on, by errno: what happened, in plain words.
_FILE_SYSTEM = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
}


def os_error_line(error: OSError, args: argparse.Namespace) -> str:
    """An ``OSError`` as one line: a full disk, a quota or a permission named in plain words with
    the path it struck (the file's, or the output's when the error names none), and what to do.

    Python's own text says "[Errno 28] No space left on device" and, where zarr writes a chunk
    through a stream, no path: a user with several disks cannot tell which one filled."""
    cause = _FILE_SYSTEM.get(error.errno or 0)
    if isinstance(error, SporadikError) or cause is None:
        return in_flags(one_line(error))
    where = error.filename or getattr(args, "output", None) or getattr(args, "store", None)
    at = f" at {where}" if where else ""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        todo = (
            "nothing was committed; free space there, or write elsewhere, and run again "
            "(with --overwrite to replace what this run left)"
        )
    else:
        todo = "write where you may, or ask for access"
    return f"{cause}{at} ({error.strerror or error}); {todo}"


def one_line_warning(message: Any, category: type[Warning], *_: Any, **__: Any) -> str:
    """A warning as a shell user reads it: what, not which line of which module raised it."""
    return f"sporadik-dask: {category.__name__}: {message}\n"


def damaged_input_errors() -> tuple[type[BaseException], ...]:
    """What the readers of input files raise on a file cut short or damaged: a zip archive's
    (``.npz``), Arrow's (Parquet, CSV) and pandas' parser's, when they are loaded."""
    import zipfile

    arrow = sys.modules.get("pyarrow.lib")
    pandas = sys.modules.get("pandas.errors")  # a CSV row of too many or too few fields
    return (
        zipfile.BadZipFile,
        *([arrow.ArrowInvalid] if arrow is not None else []),
        *([pandas.ParserError] if pandas is not None else []),
    )


def object_store_errors() -> tuple[type[BaseException], ...]:
    """The object-store client's own errors (no credentials, a bad endpoint), when loaded; s3fs
    lets botocore's through, where other failures arrive as an ``OSError``."""
    botocore = sys.modules.get("botocore.exceptions")
    if botocore is None:
        return ()
    return (botocore.BotoCoreError, botocore.ClientError)


def object_store_advice(error: BaseException) -> str:
    """What to do about an object-store client's error: a server not reached is an outage or a
    wrong endpoint, never a credential to set."""
    botocore = sys.modules.get("botocore.exceptions")
    unreachable = () if botocore is None else (
        botocore.EndpointConnectionError, botocore.ConnectTimeoutError, botocore.ReadTimeoutError
    )  # fmt: skip
    if isinstance(error, unreachable):
        return (
            "the object store did not answer: it is down or unreachable from here, or the "
            "endpoint_url in --storage-options is wrong; try again when it answers"
        )
    return (
        "reaching the object store: set its credentials, or give them, an endpoint or anon with "
        "--storage-options"
    )


def one_line(error: BaseException) -> str:
    message = " ".join(str(error).split())
    if isinstance(error, SporadikError):
        return message
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
