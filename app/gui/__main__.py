"""``python -m app.gui``: the desktop app."""

import sys

from app.gui import main

sys.exit(main())
