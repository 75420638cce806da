"""``python -m tests.fuzz``: see :mod:`tests.fuzz.run`; with ``--cluster``, the cluster links
(:mod:`tests.fuzz.cluster`); with ``--flips``, the random-flip soak (:mod:`tests.fuzz.flips`)."""

import sys

if "--cluster" in sys.argv[1:]:
    from tests.fuzz.cluster import main as cluster_main

    sys.exit(cluster_main(sys.argv[1:]))

if "--flips" in sys.argv[1:]:
    from tests.fuzz.flips import main
else:
    from tests.fuzz.run import main

sys.exit(main())
