"""Batch writing: check a DataFrame against its log (columns), pack its rows into entries (encode,
packer), write one ledger per task attempt (task), commit a job's ledgers in one compare-and-set
(job; routed for DataFrames with a `log` column).

Imports options/ and the shared modules of pyspark_ledger/datasource/, never read/ or stream/.
"""
