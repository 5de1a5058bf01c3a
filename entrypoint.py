#!/usr/bin/env python3
"""Docker entrypoint of the GitHub Action: settings come from INPUT_* / GITHUB_* variables."""

import sys

from observer_ci.action.isolation import secure_environment

if __name__ == "__main__":
    # first, before anything else: re-executes this process without secrets in its environment
    env = secure_environment()
    from observer_ci.action.main import main

    sys.exit(main(env, dry_run="--dry-run" in sys.argv[1:], handle_sigterm=True))
