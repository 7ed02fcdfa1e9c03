"""pyspark-ledger: a replicated, durable log (BookKeeper's protocol) that Spark reads and writes natively.

This module must import cheaply and without pyspark: Spark imports every top-level `pyspark_*`
module to look for a DefaultSource, and plain Python producers use the client with no JVM.
"""

__version__ = "0.1.0"
