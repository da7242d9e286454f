"""``MinibatchDataset``: :class:`~sporadik_dask.read.batches.Minibatches` as a torch
``IterableDataset``, each DataLoader worker of each distributed rank reading its own shard.

torch is an optional dependency: this module imports it only when the class is first asked for
(``sporadik_dask.MinibatchDataset``), so the package imports and runs without it.

Every worker of every rank plans the same epoch from the same seed and reads shard
``rank * workers + worker`` of ``ranks * workers`` (:func:`~sporadik_dask.planning.minibatches.
plan_epoch` deals them disjoint parts), so no position is read twice an epoch. The dataset yields
whole batches: give the DataLoader ``batch_size=None``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from sporadik_dask.format.errors import SporadikError

__all__ = ["MinibatchDataset"]

if TYPE_CHECKING:
    #: Made on first use, by the module's ``__getattr__`` (a subclass of torch's class).
    MinibatchDataset: Any


def _world(rank: int | None, ranks: int | None) -> tuple[int, int]:
    """This process's rank and the number of ranks: as given, else torch.distributed's."""
    import torch.distributed as dist

    if rank is None or ranks is None:
        if dist.is_available() and dist.is_initialized():
            return (
                dist.get_rank() if rank is None else rank,
                dist.get_world_size() if ranks is None else ranks,
            )
        return (rank or 0, ranks or 1)
    return rank, ranks


@functools.cache
def _dataset_class() -> type:
    try:
        import torch.utils.data
    except ImportError as error:
        raise ImportError(
            "sporadik_dask.MinibatchDataset is a torch IterableDataset, and torch is not "
            "installed here. Install it (pip install 'sporadik-dask[torch]'), or feed a model "
            "from sporadik_dask.Minibatches(..., output='csr' or 'dense') without torch."
        ) from error

    class MinibatchDataset(torch.utils.data.IterableDataset):  # type: ignore[type-arg, misc, unused-ignore]
        """Minibatches of a store for a torch ``DataLoader(dataset, batch_size=None, ...)``.

        Takes :class:`~sporadik_dask.read.batches.Minibatches`'s arguments (``output``
        defaults to ``"torch"``; ``seed`` is required, so every rank plans the same epoch),
        and ``rank``/``ranks`` (default: torch.distributed's, when it is initialized). Call
        :meth:`set_epoch` before each epoch, as with torch's ``DistributedSampler``: workers
        that are not persistent get a fresh copy of the dataset every epoch.
        """

        def __init__(
            self,
            store: Any,
            axis: int | str = 0,
            *,
            seed: int,
            rank: int | None = None,
            ranks: int | None = None,
            **options: Any,
        ) -> None:
            super().__init__()
            if seed is None:
                raise SporadikError(
                    "MinibatchDataset needs a seed: each worker and rank plans the epoch "
                    "itself, and with seeds of their own their shards would overlap. Pass "
                    "seed=<an integer>."
                )
            options.setdefault("output", "torch")
            self.store, self.axis, self.seed = store, axis, seed
            self.rank, self.ranks = rank, ranks
            self.options = options
            self.epoch = int(options.pop("epoch", 0))
            self._check = self._minibatches(0, 1)  # refuse bad arguments here, not in a worker

        def set_epoch(self, epoch: int) -> None:
            """The epoch the next iteration reads."""
            self.epoch = epoch

        def _minibatches(self, shard: int, shards: int) -> Any:
            from sporadik_dask.read.batches import Minibatches

            return Minibatches(
                self.store,
                self.axis,
                seed=self.seed,
                epoch=self.epoch,
                shard=shard,
                shards=shards,
                **self.options,
            )

        def _shard(self) -> tuple[int, int]:
            info = torch.utils.data.get_worker_info()
            worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
            rank, ranks = _world(self.rank, self.ranks)
            return rank * workers + worker, ranks * workers

        def __iter__(self) -> Any:
            minibatches = self._minibatches(*self._shard())
            self.epoch += 1
            return iter(minibatches)

        def __getstate__(self) -> dict[str, Any]:
            state = dict(self.__dict__)
            state.pop("_check", None)  # an open reader: each worker opens its own
            return state

    MinibatchDataset.__module__ = __name__
    return MinibatchDataset


def __getattr__(name: str) -> Any:
    if name == "MinibatchDataset":
        return _dataset_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
