"""The transport room: bytes to bookies and back (add streams, the add poller, bookie clients,
the pool, add futures, zero-copy read responses).

Everything that owns a socket, a gRPC channel or a transport thread on the client side lives
here, and only here (TLS included), so the rooms above decide what to send and never how; the
handles can then be driven over a simulated network by swapping this room out.
"""
