"""The application layer: what the window decides and runs, without a widget in sight.

``gui`` wires widgets to these functions; everything here is Qt-free and unit-tested on its own
(``tests/app``). ``jobs`` are the functions the window runs in worker threads; ``rules`` the decisions
it takes about models, files and inputs; ``gold`` and ``corpus_entry`` the two workflows that used to
live in the window.
"""
