"""pnsq's network shell shared by both daemons (nsqd and nsqlookupd): the Trio and hypercorn
pieces that are the same in each, so neither daemon imports the other.

* :mod:`pnsq._netio.http`: ASGI types, :class:`~pnsq._netio.http.HTTPError`, the request's Go-style
  query parsing, Go's JSON encoding (:func:`~pnsq._netio.http.go_json`), the V1 responder core and
  :func:`~pnsq._netio.http.serve_http` (hypercorn on Trio, with the ASGI lifespan handshake);
* :mod:`pnsq._netio.tcp`: :func:`~pnsq._netio.tcp.serve_tcp`, a TCP listener that reports its bound
  port;
* :mod:`pnsq._netio.cli`: the console scripts' bootstrap (Go flags, options, logging, ``trio.run``);
* :mod:`pnsq._netio.limits`: the open-files limit, raised to the hard limit at start (as Go does).

Never imported by ``protocol``, ``goflag``, ``pipeline`` or ``client``; imports no daemon.
"""
