"""The ``sporadik-dask`` command: demo, info, validate, convert; run, and its exit status.

A user's mistake is one clear line on stderr (:mod:`~sporadik_dask.cli.messages`) and exit status
2, never a traceback; the line names the command's flags (``--overwrite``), not the Python
arguments behind them. The flags are in :mod:`~sporadik_dask.cli.arguments`, what each command
does in :mod:`~sporadik_dask.cli.commands`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from collections.abc import Sequence

from sporadik_dask.cli.arguments import parser
from sporadik_dask.cli.messages import (
    damaged_input_errors,
    in_flags,
    object_store_advice,
    object_store_errors,
    one_line,
    one_line_warning,
    os_error_line,
)
from sporadik_dask.format.errors import SporadikError

__all__ = ["main"]


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush into a closed pipe is quiet."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status.

    0 done; 1 ``validate`` found the store invalid; 2 refused (one line on stderr); 130
    interrupted; 141 stdout closed early (``| head``).
    A traceback means a fault in this package, not the user's.
    """
    args = parser().parse_args(argv)
    shown = warnings.formatwarning
    warnings.formatwarning = one_line_warning
    try:
        return _run(args)
    finally:
        warnings.formatwarning = shown


def _run(args: argparse.Namespace) -> int:
    try:
        status = args.run(args) or 0
        sys.stdout.flush()
    except KeyboardInterrupt:
        committed = getattr(args, "committed", [])
        print(
            f"sporadik-dask: interrupted; {' and '.join(committed)} committed, complete"
            if committed
            else "sporadik-dask: interrupted; nothing was committed",
            file=sys.stderr,
        )
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return 141
    except OSError as error:
        print(f"sporadik-dask: {os_error_line(error, args)}", file=sys.stderr)
        return 2
    except (SporadikError, EOFError) as error:
        print(f"sporadik-dask: {in_flags(one_line(error))}", file=sys.stderr)
        return 2
    except Exception as error:
        if isinstance(error, damaged_input_errors()) and getattr(args, "input", None):
            print(
                f"sporadik-dask: {args.input} cannot be read ({one_line(error)}); a truncated "
                "or damaged file looks like this. Copy or write it again.",
                file=sys.stderr,
            )
            return 2
        if not isinstance(error, object_store_errors()):
            raise
        print(f"sporadik-dask: {one_line(error)} ({object_store_advice(error)})", file=sys.stderr)
        return 2
    return int(status)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
