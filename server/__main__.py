"""``python -m server``: the same as ``rtc serve``."""

import sys

from server.cli import main

sys.exit(main())
