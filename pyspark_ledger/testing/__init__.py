"""The testing room: local clusters of real bookie processes and the ZooKeeper fixture.

Tests, benchmarks, examples and the quickstart share these; production code never imports
them, which keeps subprocess and fixture plumbing off the client's import path.
"""
