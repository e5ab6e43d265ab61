import sys

from pgcdc.cli.main import main

sys.exit(main())
