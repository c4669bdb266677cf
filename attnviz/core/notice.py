"""The one way a command tells the user something beside its result: ``attnviz: note: ...`` on stderr.

Results (``wrote ...``, tables, ``--json``) go to stdout, where scripts parse them; a note (a default chosen, an
input cut, a deprecated flag) or a warning (the export's maps differ from the model's) goes to stderr with the
same ``attnviz: KIND:`` prefix as an error (``attnviz: error: ...``, :func:`attnviz.cli.error_line`), so a user
or a script tells the three apart by the prefix alone, whichever command printed it.
"""

from __future__ import annotations

import sys
from typing import Literal

Kind = Literal["note", "warning"]


def say(text: str, kind: Kind = "note") -> None:
    """Print ``attnviz: KIND: TEXT`` to stderr, on one line (a note's line breaks would leave lines unprefixed)."""
    line = " ".join(text.split()) if "\n" in text or "\r" in text else text
    print(f"attnviz: {kind}: {line}", file=sys.stderr)
