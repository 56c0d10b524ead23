"""`python -m blocklab.cli`."""

import sys

from blocklab.cli import main

sys.exit(main())
