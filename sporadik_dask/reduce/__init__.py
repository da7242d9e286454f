"""Reductions of a store: one pass of bincount fields per reduction, merged by adding."""
