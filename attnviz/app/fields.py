"""The window's input fields as its refusals and notes name them: the input panel's row labels (the panel draws
these words, so a message and the field it names cannot drift apart), the phrases that say what to set them to, and
for a fix the window has no control for (the memory cap, a feeds file, a quantized variant, the device), what its
user can do there instead: never a flag it has no place to type."""

from __future__ import annotations

from attnviz.core.limits import MEMORY_ENV
from attnviz.core.setting_words import Wording

# AttnvizError.param -> the input panel's row
LABELS = {"max_seconds": "max seconds", "max_tokens": "max tokens", "generate": "generate", "beams": "beams"}
IMAGE_SIZE = "the size beside normalise"  # the normalise row's second box (N x N pixels; its row's label names it)
OPEN_AUDIO = "File ▸ Open audio…"
CHOOSE_TOKENIZER = "File ▸ Choose tokenizer…"
_AT_START = f"start attnviz with {MEMORY_ENV}={{gb}}"  # the cap is the process's: no box in the window moves it
_LOWER = "cut the input by setting max tokens lower"  # the window picks per-head maps by itself (memory auto)

# core/setting_words.FIXES in the window's words, key for key (tests/app/test_app_fields.py checks none is missing
# and none names a flag)
WINDOW_FIXES = {
    "lower_need": _LOWER,
    "lower_need_if": f"if the need grows with the input, {_LOWER}",
    "raise_cap": f"raise the memory cap to {{gb}} GB ({_AT_START})",
    "raise_cap_or_env": f"raise the memory cap to {{gb}} GB ({_AT_START})",
    "cap_given": "set when attnviz started",
    "beams_need_generate": "beams {beams} searches a generation; set generate to 1 or more too (or beams to 1)",
    "no_input": "no input: type a text, or choose an image or a sound file",
    "no_input_text": "type one in the text box (its sample: {shown})",
    "no_input_image": "choose one in the image box (its sample: {shown})",
    "no_input_audio": "choose one in the audio box (its sample: {shown})",
    "generate_batch": "generate runs one sequence; these inputs hold a batch of {rows} rows: give one row, or set "
    "generate to 0 to see every row",
    "beams_batch": "beams search one sequence; these inputs hold a batch of {rows} rows: give one row",
    "beams_frames": "beams: the hypotheses' runs gave {label} different frames; set beams to 1",
    "beams_frames_some": "beams: {label} is a vision tower's frames in some hypotheses' runs only; set beams to 1",
    "more_steps": "set generate higher",
    "fewer_steps": "set generate lower",
    "smaller_figure": "export a view of fewer tokens",  # the window's export sizes the figure by the map
    "dark_map": "the colour scale 'each row stretched to its maximum' draws each query row on its own top (or zoom "
    "in on a stretched scale)",
    "room": "{name}'s decoder holds {positions} positions; a prompt of {prompt} tokens and generate {generate} need "
    "{fed}: set generate to {most} or fewer",
    "room_pair": " (or a shorter transcript)",
    "pair_apart": "so max tokens cannot tell them apart; remove it from the text, or set max tokens to all",
    "truncate": "set max tokens to {n} to truncate",
    "one_image": "give one image (one file in the image box)",
    "image_needs_model": "open a vision or captioning model first, then the image {name}",
    "image_size": f"set {IMAGE_SIZE}",
    "image_size_file": f"set {IMAGE_SIZE} or fix the file",
    "image_stat": "choose a preset beside normalise",
    "image_stat_finite": "choose a preset beside normalise",
    "image_std_zero": "choose a preset beside normalise",
    "feeds": "",  # the window feeds what its boxes make, no feeds file: the other fixes stand alone
    "sound_file": f"choose a sound file (the audio box, or {OPEN_AUDIO})",
    "encoder_input": "open the export folder",
    "full_variant": "(a Hub repository: its full-precision set, the window's default)",
    "choose_variant": "(start attnviz with one of them as its variant)",
    "cpu": "start attnviz with the CPU as its device",
    "tokenizer": f"choose one ({CHOOSE_TOKENIZER})",
    "generate_ablate": "generate needs a decoder or encoder-decoder model and one input row; set generate to 0",
    "ablate_feeds": "(open the merged model file)",
    "alignment_heads": "fix it",
    "alignment_head": "fix it",
    "no_audio": OPEN_AUDIO,
    "gold_file": "word times file",
    "cut_text": "the text as max tokens cut it",
    "cut_what": "{what} as max tokens cut it",
}
# what a refusal raised by a window's run says (core/setting_words.py): the field, never a flag the window has no
# place for ("set max seconds to 30 to keep the first 30 s, or to 31 to take it all")
WINDOW = Wording(
    names={**LABELS, "output": ""},  # an export's file: the one its dialog chose ("choose a writable folder")
    give="set {name} to {value}",
    again="to {value}",
    by="by setting {name} to {value}",
    fixes=WINDOW_FIXES,
)
