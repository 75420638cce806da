"""pnsq for its users: :mod:`pnsq.client` (a partition-aware producer and consumer, Trio and
blocking) and :mod:`pnsq.spark` (the PySpark data source, ``format("pnsq")``).

The daemons are the ``nsqd`` and ``nsqlookupd`` commands (packages :mod:`nsqd`, :mod:`lookupd`);
their shared helpers live here as private modules (``pnsq._goflag``: Go's flag syntax,
``pnsq._netio``: the Trio listeners and HTTP responder). Importing this package imports nothing.
"""
