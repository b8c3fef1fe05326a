import sys

from loadtest.reliability.runner import main

sys.exit(main())
