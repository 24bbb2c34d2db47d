"""`python -m jaxdl train ...`: the same as the `jaxdl` console script."""

import sys

from jaxdl.cli import main

if __name__ == "__main__":
    sys.exit(main())
