import sys

from attnviz.cli import main

sys.exit(main(leave=True))
