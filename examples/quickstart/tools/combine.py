"""Combine report JSON files into one Markdown table (stdout)."""

import json
import sys

rows = [json.load(open(p)) for p in sorted(sys.argv[1:])]
print("| document | lines | words | distinct | top word |")
print("|---|---:|---:|---:|---|")
for r in rows:
    top = r["top"][0][0] if r["top"] else ""
    print(f"| {r['name']} | {r['lines']} | {r['words']} | {r['distinct']} | {top} |")
print(f"\n{len(rows)} documents, {sum(r['words'] for r in rows)} words in total.")
