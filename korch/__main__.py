"""`python -m korch` runs the CLI."""

import sys

from korch.cli import main

sys.exit(main())
