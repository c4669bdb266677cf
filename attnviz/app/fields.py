"""The window's input fields as its refusals name them: the input panel's row labels (the panel draws these words,
so a message and the field it names cannot drift apart) and the phrases that say what to set them to."""

from __future__ import annotations

from attnviz.core.setting_words import Wording

LABELS = {"max_seconds": "max seconds"}  # AttnvizError.param -> the input panel's row

# what a refusal raised by a window's run says (core/setting_words.py): the field, never a flag the window has no
# place for ("set max seconds to 30 to keep the first 30 s, or to 31 to take it all")
WINDOW = Wording(names=LABELS, give="set {name} to {value}", again="to {value}", by="by setting {name} to {value}")
