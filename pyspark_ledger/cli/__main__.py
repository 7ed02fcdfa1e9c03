import sys

from pyspark_ledger.cli import main

sys.exit(main())
