import sys

from loadtest.autoscaling.runner import main

sys.exit(main())
