"""``python -m trio_triggers.cli`` is the ``trio-triggers`` command."""

from __future__ import annotations

import sys

from . import main

sys.exit(main())
