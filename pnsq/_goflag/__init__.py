"""Go's ``flag`` package and value syntax for the daemons' command lines (stdlib only).

nsqd and nsqlookupd take their flags in Go syntax (``-flag=v``, ``--flag v``, bare booleans) and
answer with Go's error texts. This package is shared by both, so that ``lookupd`` need not
import ``nsqd``.
"""
