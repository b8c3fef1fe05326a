import sys

from loadtest.batch_bench.runner import main

sys.exit(main())
