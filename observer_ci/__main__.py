import sys

from observer_ci.cli import main

sys.exit(main())
