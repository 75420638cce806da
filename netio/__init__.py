"""pnsq's network shell shared by both daemons (nsqd and nsqlookupd): the Trio and hypercorn
pieces that are the same in each, so neither daemon imports the other.

* :mod:`netio.http`: ASGI types, :class:`~netio.http.HTTPError`, the request's Go-style query
  parsing, Go's JSON encoding (:func:`~netio.http.go_json`), the V1 responder core and
  :func:`~netio.http.serve_http` (hypercorn on Trio, with the ASGI lifespan handshake);
* :mod:`netio.tcp`: :func:`~netio.tcp.serve_tcp`, a TCP listener that reports its bound port;
* :mod:`netio.cli`: the console scripts' bootstrap (Go flags, options, logging, ``trio.run``);
* :mod:`netio.limits`: the open-files limit, raised to the hard limit at start (as Go does).

Never imported by ``protocol``, ``goflag``, ``pipeline`` or ``client``; imports no daemon.
"""
