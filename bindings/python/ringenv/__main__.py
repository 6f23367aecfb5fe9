"""``python -m ringenv``: the same as the ``ringenv`` command (and ``python -m ringenv.cli``)."""

import sys

from ringenv.cli import main

if __name__ == "__main__":
    sys.exit(main())
