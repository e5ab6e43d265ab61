import sys

from pgcdc.cli import main

sys.exit(main())
