"""The autorecovery room: the orphan auditor and re-replication of a lost bookie's fragments.

These are operators' background jobs over many ledgers, above the handles they use: kept apart
so the client stays small for producers, and so they can grow (elected auditor, replication
workers, scrub reports) without touching the write and read paths.
"""
