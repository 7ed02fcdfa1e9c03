"""Structured streaming: the micro-batch source (offsets, scan, admission, read, plan) built on
read/, and the exactly-once sink (sink, sink_epoch, sink_progress) built on write/; source.py
wraps both in Spark's classes.

The top room: imports read/, write/, options/ and the shared modules; nothing below imports it.
"""
