"""Highly variable genes from each gene's mean and variance, as scanpy selects them.

scanpy's ``highly_variable_genes`` (flavors ``"seurat"`` and ``"cell_ranger"``) needs of the data
only the mean and variance of each gene; the rest is this table's arithmetic, written here in
numpy and pandas so that the package does not import scanpy. Pure: no I/O, no dask.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from sporadik_dask.format.errors import SporadikError

__all__ = ["FLAVORS", "Flavor", "dispersion_table"]

Flavor = Literal["seurat", "cell_ranger"]

#: The flavors selected here: scanpy's dispersion-based ones.
FLAVORS: tuple[Flavor, ...] = ("seurat", "cell_ranger")

#: The standard normal's third quartile: a median absolute deviation divided by it estimates
#: a standard deviation (statsmodels' ``mad``, which scanpy's ``cell_ranger`` flavor calls).
_NORMAL_Q3 = 0.6744897501960817


def dispersion_table(
    means: npt.NDArray[np.floating[Any]],
    variances: npt.NDArray[np.floating[Any]],
    *,
    flavor: Flavor = "seurat",
    n_top_genes: int | None = None,
    n_bins: int = 20,
    min_disp: float = 0.5,
    max_disp: float = np.inf,
    min_mean: float = 0.0125,
    max_mean: float = 3,
    index: Any = None,
) -> pd.DataFrame:
    """scanpy's table of highly variable genes from each gene's mean and variance (ddof 1).

    For ``"seurat"``, ``means`` and ``variances`` are those of the data ``expm1``'d back (as
    scanpy takes them); for ``"cell_ranger"``, of the log data itself.

    1. A mean of 0 becomes 1e-12; the dispersion is variance over mean. Under ``"seurat"`` a
       dispersion of 0 becomes NaN, then the dispersion is its log and the mean its ``log1p``.
    2. Genes are binned by mean: ``n_bins`` equal bins (``"seurat"``), or at the 10th, 15th,
       ..., 100th percentiles (``"cell_ranger"``).
    3. Each gene's dispersion is normalized by its bin's mean and standard deviation
       (``"seurat"``; a bin of one gene gives it 1) or median and median absolute deviation
       (``"cell_ranger"``).
    4. The ``n_top_genes`` largest normalized dispersions are highly variable (ties included);
       without it, the genes within the mean and dispersion cutoffs.
    """
    if flavor not in FLAVORS:
        raise SporadikError(
            f"flavor={flavor!r} is not one computed here; the flavors are {FLAVORS!r} (scanpy's "
            "dispersion-based ones, which need only each gene's mean and variance)."
        )
    mean = np.array(means, dtype=np.float64)
    mean[mean == 0] = 1e-12
    with np.errstate(divide="ignore", invalid="ignore"):
        dispersion = np.asarray(variances, dtype=np.float64) / mean
        if flavor == "seurat":
            dispersion[dispersion == 0] = np.nan
            dispersion = np.log(dispersion)
            mean = np.log1p(mean)
    df = pd.DataFrame({"means": mean, "dispersions": dispersion})
    if index is not None:
        df.index = pd.Index(index)
    if flavor == "seurat":
        df["mean_bin"] = pd.cut(df["means"], bins=n_bins)
    else:
        edges = np.r_[-np.inf, np.percentile(mean, np.arange(10, 105, 5)), np.inf]
        df["mean_bin"] = pd.cut(df["means"], bins=edges)
    grouped = df.groupby("mean_bin", observed=True)["dispersions"]
    if flavor == "seurat":
        stats = grouped.agg(avg="mean", dev="std")
        alone = stats["dev"].isnull()  # a bin of one gene: its normalized dispersion is 1
        stats.loc[alone, "dev"] = stats.loc[alone, "avg"]
        stats.loc[alone, "avg"] = 0
    else:
        stats = grouped.agg(avg="median", dev=_mad)
    stats = stats.loc[df["mean_bin"]].set_index(df.index)
    df["dispersions_norm"] = (df["dispersions"] - stats["avg"]) / stats["dev"]
    norm = df["dispersions_norm"].to_numpy()
    if n_top_genes is None:
        norm = np.nan_to_num(norm)
        df["highly_variable"] = (
            (mean > min_mean) & (mean < max_mean) & (norm > min_disp) & (norm < max_disp)
        )
    else:
        df["highly_variable"] = np.nan_to_num(norm, nan=-np.inf) >= _nth_highest(norm, n_top_genes)
    return df


def _nth_highest(values: npt.NDArray[np.float64], n: int) -> float:
    """The ``n``-th largest value that is not NaN (the smallest, if fewer)."""
    present = np.sort(values[~np.isnan(values)])[::-1]
    if present.size == 0:
        return np.inf
    return float(present[min(max(n, 1), present.size) - 1])


def _mad(values: pd.Series) -> float:
    """The median absolute deviation from the median, over the standard normal's third
    quartile (a NaN among the values gives NaN, as statsmodels' does)."""
    a = values.to_numpy(dtype=np.float64)
    if a.size == 0:
        return np.nan
    return float(np.median(np.abs(a - np.median(a)) / _NORMAL_Q3))
