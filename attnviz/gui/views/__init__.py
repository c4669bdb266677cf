"""The main window's tabs: each view draws the shared :class:`~attnviz.gui.session.Session`."""
