"""The desktop app (PySide6 + pyqtgraph) -- the only attnviz package that imports Qt.

Layout: :mod:`session` (the shared document), :mod:`selection` (Qt-free map selection),
:mod:`workers` (QThreadPool workers), ``views/`` (one module per tab), ``widgets/`` (docks),
:mod:`main_window`, :mod:`app` (QApplication set-up) and :mod:`command` (``attnviz open``).
"""
