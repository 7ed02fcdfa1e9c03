"""The protocol room: BookKeeper's quorum rules as pure code (reference/bookkeeper-protocol.md).

Nothing here touches a socket, a thread, a clock or the metadata store: inputs are events and
values, outputs are decisions and commands. The write handle, recovery and the deterministic
simulator (pyspark_ledger.testing.sim) all run this very code, so a rule proven under the
simulator's faults is the rule production follows.
"""
