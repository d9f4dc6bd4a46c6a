"""`python -m edge0`: the `edge0` command (edge0.cli.main).

Written by hand, not exported from a notebook: nbdev runs every notebook cell, and this file's one statement
would run the command inside the notebook.
"""
import sys
from edge0.cli import main

sys.exit(main())
