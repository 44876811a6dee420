"""Write OUT.json: the textstats summary of one input file."""

import json
import sys
from pathlib import Path

from textstats import summarise

src, out = Path(sys.argv[1]), Path(sys.argv[2])
out.write_text(json.dumps(summarise(src.stem, src.read_text()), indent=2) + "\n")
print(f"{src} -> {out}")
