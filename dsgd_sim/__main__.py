"""``python -m dsgd_sim``: see ``dsgd_sim.cli``."""

import sys

from .cli import main

sys.exit(main())
