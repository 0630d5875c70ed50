"""`python -m cli ...` is `specfill ...`."""
import sys

from cli.main import main

if __name__ == "__main__":
    sys.exit(main())
