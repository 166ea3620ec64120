"""``python -m tcl.control.daemon``: how ``tcl submit`` starts the daemon detached."""

import sys

from tcl.control.daemon.server import main

sys.exit(main())
