"""`python -m sweeper.sim ...`: run the simulated SGLang server."""

import sys

from sweeper.sim.server import main

sys.exit(main())
