"""attnviz: find, run and inspect the attention of transformer models exported to ONNX."""

__version__ = "0.1.0"


class AttnvizError(Exception):
    """A user-facing problem: one line saying what is wrong and how to fix it.

    The CLI prints ``str(err)`` without a traceback; the GUI shows it in a message box.
    ``param`` names the logical setting to fix ("image", "tokenizer", "text", "layer"...), not a
    flag or a widget: the CLI maps it to its flag, the GUI to the control a user can change.
    """

    def __init__(self, message: str = "", *, param: str | None = None):
        super().__init__(message)
        self.param = param

    def __reduce__(self):
        # keep ``param`` across pickling (errors come back from worker processes)
        return (_rebuild_error, (type(self), self.args, self.param))


def _rebuild_error(cls, args, param):
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.param = param
    return err
