"""How many generation steps a translation or captioning run takes when nobody says: one number for the window,
``attnviz figure``, ``extract``, ``compare``, ``ablate`` and a corpus run (plain Python: the command line's parsers
and ``attnviz corpus``'s settings read it before numpy is imported)."""

# enough for a sentence or a caption, few enough to run in a second on a CPU (a generation stops at EOS first)
DEFAULT_GENERATE = 32
