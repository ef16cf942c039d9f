"""``python -m proxy.config``: the reference table, or a check of a properties file."""

import sys

from proxy.config.keys import main

sys.exit(main())
