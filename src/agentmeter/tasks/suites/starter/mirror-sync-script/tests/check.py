import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile

AS = os.environ["AS_AGENT"]  # runs agent-written code as the unprivileged agent user


def snapshot(root: str) -> dict[str, tuple[str, object, int]]:
    out: dict[str, tuple[str, object, int]] = {}
    for dp, dns, fns in os.walk(root):
        for n in dns + fns:
            p = os.path.join(dp, n)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p), 0)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", None, 0)
            else:
                out[rel] = ("file", open(p, "rb").read(), stat.S_IMODE(st.st_mode))
    return out


def expected(src: dict, dst: dict) -> list[str]:
    lines: list[tuple[bytes, int, str]] = []
    for p, v in src.items():
        if p not in dst:
            lines.append((p.encode(), 1, f"ADD {p}"))
        elif dst[p][0] != v[0]:
            lines.append((p.encode(), 0, f"DELETE {p}"))
            lines.append((p.encode(), 1, f"ADD {p}"))
        elif v[0] != "dir" and dst[p] != v:
            lines.append((p.encode(), 1, f"UPDATE {p}"))
    for p, v in dst.items():
        if p not in src:
            lines.append((p.encode(), 0, f"DELETE {p}"))
    return [x[2] for x in sorted(lines)]


def populate(root: str, r: random.Random, variant: int) -> None:
    os.makedirs(root, exist_ok=True)
    names = ["a.txt", "b c.txt", "run.sh", "data", "data/x.bin", "data/sub", "data/sub/y", "empty",
             "link1", "link2", "docs", "docs/readme.md", "mixed", "mixed/inner.txt", "old dir",
             "old dir/f"]
    for n in names:
        if r.random() < 0.25:
            continue
        p = os.path.join(root, n)
        parent = os.path.dirname(p)
        if not os.path.isdir(parent):
            continue
        if n.startswith("link"):
            os.symlink(r.choice(["a.txt", "data/x.bin", "missing target", "../outside"]), p)
        elif n in ("data", "data/sub", "empty", "docs", "old dir") or (n == "mixed" and variant == 0):
            os.makedirs(p, exist_ok=True)
        else:
            with open(p, "w") as f:
                f.write(r.choice(["alpha\n", "beta\n", "alpha\n" * 3, ""]))
            os.chmod(p, r.choice([0o644, 0o755, 0o600, 0o644]))


if not os.access("/app/mirror", os.X_OK):
    sys.exit("/app/mirror missing or not executable")
for seed in range(12):
    tmp = tempfile.mkdtemp()
    src, dst = os.path.join(tmp, "src"), os.path.join(tmp, "dst dir")
    r = random.Random(seed)
    populate(src, r, 0 if seed % 2 else 1)
    if seed % 4 != 3:
        populate(dst, r, 1 if seed % 2 else 0)
    before_src = snapshot(src)
    before_dst = snapshot(dst) if os.path.exists(dst) else {}
    want = expected(before_src, before_dst)
    subprocess.run([AS, "--own", tmp], check=True)  # the trees are the agent program's to change
    res = subprocess.run([AS, "/app/mirror", src, dst], capture_output=True, text=True, timeout=30)
    got = [ln for ln in res.stdout.split("\n") if ln]
    if res.returncode != 0 or got != want:
        sys.exit(f"seed {seed}: rc={res.returncode}\n got  {got}\n want {want}\n{res.stderr[-500:]}")
    if snapshot(src) != before_src:
        sys.exit(f"seed {seed}: SRC modified")
    if snapshot(dst) != before_src:
        sys.exit(f"seed {seed}: DST is not a mirror")
    res = subprocess.run([AS, "/app/mirror", src, dst], capture_output=True, text=True, timeout=30)
    if res.returncode != 0 or res.stdout.strip():
        sys.exit(f"seed {seed}: second run printed {res.stdout!r}")
    shutil.rmtree(tmp)
print("ok")
