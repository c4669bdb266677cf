"""attnviz: find, run and inspect the attention of transformer models exported to ONNX."""

__version__ = "0.1.0"


class AttnvizError(Exception):
    """A user-facing problem: one line saying what is wrong and how to fix it.

    The CLI prints ``str(err)`` without a traceback; the GUI shows it in a message box.
    """
