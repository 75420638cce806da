"""``python -m tests.fuzz``: see :mod:`tests.fuzz.run`; ``--flips``: :mod:`tests.fuzz.flips`."""

import sys

if "--flips" in sys.argv[1:]:
    from tests.fuzz.flips import main
else:
    from tests.fuzz.run import main

sys.exit(main())
