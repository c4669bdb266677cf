"""Opening a model on the heads it declares (``attnviz.alignment``), once per opened model.

Whichever view first shows the model's cross-attention does it: Alignment for the translation demo, Image regions
for the captioning demo (its guided heads point at the objects the words name).  The state lives on the session,
so the two views agree, and a caller that chose a head itself (``attnviz open --head``, a corpus example) keeps it.
"""

from __future__ import annotations

from attnviz.core import metadata as md
from attnviz.core import view as vm


def declared(session) -> tuple[list[tuple[int, int]], str] | None:
    """The model's alignment heads and row convention, if it names them: as the run recorded them (``figure``
    reads the same), else from the model (maps saved before runs recorded it)."""
    found = vm.declared_alignment(session.result)
    if found is not None:
        return [found[0]], found[1]
    model = session.model
    return md.alignment_heads(model.meta) if model is not None else None


def keep_selection(session) -> None:
    """The caller chose the head for this model: do not move to the declared head when its result arrives."""
    session.declared_opened_for = session.model


def open_on_declared(session, block: int | None) -> None:
    """Select the first declared head of cross-attention ``block`` (and its row convention), once per model."""
    found = declared(session)
    if found is None or block is None or session.declared_opened_for is session.model:
        return
    session.declared_opened_for = session.model
    layer, head = found[0][0]
    if layer < session.blocks[block].n_layers and head < session.blocks[block].heads_in(layer):
        session.select(block=block, layer=layer, head=head, mode="head", rows=found[1])
