"""`python -m clglow` is the `clglow` command."""
import sys

from .cli import main

sys.exit(main())
