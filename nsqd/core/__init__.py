"""Pure broker state: channel cursors, in-flight and deferred messages.

No I/O, no Trio, no clock: time comes in as ``now_ns`` arguments.
"""
