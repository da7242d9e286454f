"""The ``sporadik-dask`` command."""
