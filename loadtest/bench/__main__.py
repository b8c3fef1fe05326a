import sys

from loadtest.bench.runner import main

sys.exit(main())
