"""
C{python -m kafkatw.config (--markdown | --update PATH | --check PATH)}:
docs/configuration.md's key tables (L{kafkatw.config.docs.main}).
"""

import sys

from .docs import main

raise SystemExit(main(sys.argv[1:]))
