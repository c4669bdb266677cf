"""The README's corpus-with-gold shot: the translation demo over 300 held-out verses, sorted by AER, head 2:0's
worst-aligned pairs (docs/screenshot-corpus-gold.png).

    attnviz testset translation --out held
    attnviz corpus models/translation.onnx --texts held/test.jsonl --text-pair-column en --gold-column gold \
            --max-items 300 --out corpus
    xvfb-run -a -s "-screen 0 1400x900x24" python docs/shoot_corpus_gold.py corpus docs/screenshot-corpus-gold.png
"""

import sys
import time

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from attnviz.gui.main_window import MainWindow
from attnviz.gui.views.corpus import open_corpus_results

app = QApplication.instance() or QApplication(sys.argv)
w = MainWindow()
w.resize(1400, 900)
v = open_corpus_results(w, sys.argv[1])
v.resize(1400, 900)
v.score.setCurrentText("aer")
col = v.columns.index("aer")
v.table.sortItems(col, Qt.SortOrder.AscendingOrder)
head = next(h for h in v.heads if (h["stack"], h["kind"], h["layer"], h["head"]) == ("decoder", "cross", 2, 0))
v.show_head(head)
v.table.selectRow(0)
for _ in range(30):
    app.processEvents()
    time.sleep(0.05)
v.grab().save(sys.argv[2])
print("saved", sys.argv[2])
