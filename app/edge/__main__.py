import sys

from app.edge.wrapper import main

sys.exit(main())
