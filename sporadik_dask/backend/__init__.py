"""The xarray backend, one layer a module, as xarray's own backends are built.

- ``entrypoint``: ``SporadikBackendEntrypoint``, what ``engine="sporadik"`` names; imports
  xarray and the standard library only, since xarray imports every installed entry point on its
  first ``open_dataset`` of any file. Everything else loads when a store is opened.
- ``dataset``: a store to a Dataset of one lazy variable, with the labels the writer stored.
- ``array``: ``SporadikBackendArray``, the lazy array handing every selection to the reader.
- ``chunkmanager``: keeps the dask chunks of sporadik variables sparse under ``chunks=``.
- ``concatenation``: dask joins ``sparse.COO`` blocks along a later axis by counting sorts;
  ``xr.concat`` and ``reindex`` of lazily opened variables read their selections first.
- ``accessor``: ``.sporadik``, per-position statistics; registered by ``import sporadik_dask``.

This package module imports nothing, so loading the entry point loads only what it needs.
"""
