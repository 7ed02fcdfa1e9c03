"""python -m pyspark_ledger.testing.sim --seeds N [--first-seed S] [--jobs J] [--replay SEED] [--trace]"""

import sys

from pyspark_ledger.testing.sim.cli import main

sys.exit(main())
