import sys

from ragopt.cli import main

sys.exit(main())
