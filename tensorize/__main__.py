"""``python -m tensorize`` runs the command line."""

import sys

from tensorize.cli import main

sys.exit(main())
