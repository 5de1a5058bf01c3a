"""Torch-free facts every side shares: the results schema, constants, errors, logs,
the journal, matrix legs, dim names, workflow commands. Imports nothing else of the package."""
