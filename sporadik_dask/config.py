"""The ``sporadik`` keys of ``dask.config``: their defaults, from ``sporadik.yaml``, registered
with dask when the package is imported, as dask's own sub-projects register theirs.

``dask.config.get("sporadik.spill-bytes")`` then answers in every process that imported the
package (a dask worker imports it when it unpickles a task of ours), and a user's setting (in
code, a YAML file under ``~/.config/dask/``, or ``DASK_SPORADIK__SPILL_BYTES``) takes precedence.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask.config
import yaml

__all__ = ["DEFAULTS", "PATH"]

#: The file holding every key and its default.
PATH = Path(__file__).with_name("sporadik.yaml")

with PATH.open() as _file:
    #: ``{"sporadik": {key: default}}``, as read from :data:`PATH`.
    DEFAULTS: dict[str, Any] = yaml.safe_load(_file)

dask.config.update_defaults(DEFAULTS)
