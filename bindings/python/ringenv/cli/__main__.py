"""``python -m ringenv.cli``: the same as the ``ringenv`` command."""

import sys

from ringenv.cli import main

if __name__ == "__main__":
    sys.exit(main())
