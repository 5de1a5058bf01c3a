"""The child process: run observation scripts, export, replay, probe, diagnose.
Produces ``results.json`` (the contract with the parent)."""
