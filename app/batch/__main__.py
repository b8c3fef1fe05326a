import sys

from app.batch.cli import main

sys.exit(main())
