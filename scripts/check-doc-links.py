#!/usr/bin/env python3
"""Checks that every relative link in README.md, docs/*.md and io/SANDBOX.md names a file that
exists and, when it has a #fragment, a heading (GitHub's slug) or an <a id> in that file."""
import pathlib, re, sys

root = pathlib.Path(__file__).resolve().parent.parent
files = [root / "README.md", root / "io/SANDBOX.md", *sorted((root / "docs").glob("*.md"))]
link = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")

def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")

def anchors(path):
    text = path.read_text()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    found = {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, flags=re.M)}
    found |= set(re.findall(r'<a id="([^"]+)"', text))
    return found

bad = 0
for f in files:
    text = re.sub(r"```.*?```", "", f.read_text(), flags=re.S)
    for target in link.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, frag = target.partition("#")
        dest = (f.parent / path).resolve() if path else f
        if not dest.exists():
            print(f"{f.relative_to(root)}: {target}: no such file")
            bad += 1
        elif frag and dest.suffix == ".md" and frag not in anchors(dest):
            print(f"{f.relative_to(root)}: {target}: no such heading")
            bad += 1
print(f"{len(files)} files checked, {bad} broken link(s)")
sys.exit(1 if bad else 0)
