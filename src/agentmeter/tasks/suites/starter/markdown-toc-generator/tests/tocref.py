"""Reference table-of-contents generator and test-document generator."""
import random
import re

ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def heading_text(raw: str | None) -> str:
    text = (raw or "").strip()
    text = re.sub(r"(^|[ \t]+)#+$", "", text).strip()
    return text


def slug(text: str) -> str:
    s = text.lower().replace("`", "")
    s = re.sub(r"[^a-z0-9 _-]", "", s)
    return s.replace(" ", "-")


def toc(doc: str) -> str:
    used: set[str] = set()
    out = []
    fence = None
    for line in doc.split("\n"):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                    and line.strip() == m.group(1):
                fence = None
            continue
        h = ATX.match(line)
        if not h:
            continue
        level, text = len(h.group(1)), heading_text(h.group(2))
        if not text:
            continue
        base = slug(text)
        s, n = base, 0
        while s in used:
            n += 1
            s = f"{base}-{n}"
        used.add(s)
        if 2 <= level <= 4:
            out.append(f"{'  ' * (level - 2)}- [{text}](#{s})")
    return "\n".join(out) + ("\n" if out else "")


PIECES = [
    "# Title", "## Install", "## Usage", "### Options", "### Options", "## Options", "#### Deep `code` bit",
    "##### Too deep", "## Install", "## Install-1", "## What's new? (v2.0)", "## Trailing hashes ##",
    "##   Spaces   around   ", "#NotAHeading", "    ## indented code", "   ## Three spaces",
    "## C++ & Rust: a *comparison*", "## snake_case_name", "## Ünïcödé Heading", "###",
    "## #hash in text", "text paragraph", "", "- list item", "## Café -- crème",
    "```\n## inside fence\n```", "~~~python\n# comment\n## also inside\n```\nstill inside\n~~~",
    "````\n```\n## nested\n````", "## 1. Numbered", "## Install",
]


def generate(seed: int) -> str:
    r = random.Random(seed)
    return "\n".join(r.choice(PIECES) for _ in range(r.randint(10, 40))) + "\n"
