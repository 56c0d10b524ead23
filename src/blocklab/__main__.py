"""`python -m blocklab`."""

import sys

from blocklab.cli import main

sys.exit(main())
