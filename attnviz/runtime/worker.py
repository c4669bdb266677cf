"""The crash-isolation child: ``python -m attnviz.runtime.worker FD OUTDIR`` (started by :mod:`attnviz.runtime.host`).

A module of its own so that the server's classes pickle under their real module name, not ``__main__``.
"""

import sys
from multiprocessing.connection import Connection

from attnviz.runtime.host import _serve

if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])), sys.argv[2])
