"""The ledger room: WriteHandle, ReadHandle and recovery, one ledger at a time.

They drive the protocol's decisions with the transport and the metadata store, and reach the
rest of the client only through the narrow LedgerContext (context.py): they never import
LedgerClient, so the client can be built from them without an import circle, and a test or a
simulator can hand them a context of its own.
"""
