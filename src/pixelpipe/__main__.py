"""`python -m pixelpipe ...`: the `pixelpipe` command (pixelpipe.tools.cli), the same arguments
and exit codes."""

import sys

from .tools.cli import main

if __name__ == "__main__":
    sys.exit(main())
