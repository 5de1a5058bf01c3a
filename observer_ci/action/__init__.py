"""Torch-free: the action's parent process: settings, workspace, isolation,
the publishing step and its payload."""
