import sys

from ragopt.cli import main

if __name__ == "__main__":  # not when a spawned child process imports the main module
    sys.exit(main())
