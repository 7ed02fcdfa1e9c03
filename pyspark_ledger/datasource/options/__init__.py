"""The options of `format("ledger")`, parsed once into typed values on the driver: the whole set
(source_options), the read options (read), positions (positions), and value parsers (values).

The bottom room: imports only the shared leaf modules (errors), so every other room may use it.
"""
