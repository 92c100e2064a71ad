"""``python -m server``: the same as ``rtc serve``."""

import sys

from .cli import main

sys.exit(main())
