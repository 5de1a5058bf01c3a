#!/usr/bin/env python3
"""Docker entrypoint of the GitHub Action: settings come from INPUT_* / GITHUB_* variables."""

import sys

from observer_ci.action import main

if __name__ == "__main__":
    sys.exit(main(dry_run="--dry-run" in sys.argv[1:]))
