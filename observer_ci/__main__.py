import sys

from observer_ci.cli import command

sys.exit(command())
