import os
import random
import shutil
import subprocess
import sys
import tempfile

AS = os.environ["AS_AGENT"]  # runs agent-written code as the unprivileged agent user


def build(root: str, seed: int) -> None:
    r = random.Random(seed)
    blobs = [bytes(r.randrange(256) for _ in range(r.randint(1, 3000))) for _ in range(6)]
    blobs.append(blobs[0][:-1] + bytes([(blobs[0][-1] + 1) % 256]))  # same size, different bytes
    dirs = ["", "a", "a/b c", "z", "m/n", ".hidden"]
    for d in dirs:
        os.makedirs(os.path.join(root, d), exist_ok=True)
    for i in range(25):
        p = os.path.join(root, r.choice(dirs), f"f{r.randint(0, 99)} {i}.dat")
        open(p, "wb").write(r.choice(blobs))
    open(os.path.join(root, "empty-a"), "wb").close()
    open(os.path.join(root, "z/empty-b"), "wb").close()
    os.symlink("f-none", os.path.join(root, "dangling"))


def reference(root: str) -> tuple[list[str], dict[str, str]]:
    groups: dict[bytes, list[str]] = {}
    for dp, _, fns in os.walk(root):
        for fn in fns:
            p = os.path.join(dp, fn)
            if os.path.islink(p) or os.path.getsize(p) == 0:
                continue
            groups.setdefault(open(p, "rb").read(), []).append(os.path.relpath(p, root))
    lines, target, saved = [], {}, 0
    for content, paths in groups.items():
        paths.sort(key=lambda s: s.encode())
        keep = paths[0]
        kino = os.stat(os.path.join(root, keep)).st_ino
        for p in paths[1:]:
            target[p] = keep
            if os.stat(os.path.join(root, p)).st_ino != kino:
                lines.append(f"linked {p} -> {keep}")
                saved += len(content)
    lines.sort(key=lambda s: s.encode())
    return lines + [f"saved {saved}"], target


if not os.access("/app/dedupe", os.X_OK):
    sys.exit("/app/dedupe missing or not executable")
tmp = tempfile.mkdtemp()
roots = []
shutil.copytree("/tests/photos", os.path.join(tmp, "photos"))
roots.append(os.path.join(tmp, "photos"))
for seed in (1, 2, 3):
    root = os.path.join(tmp, f"r{seed}")
    build(root, seed)
    roots.append(root)
# a pre-existing hard link to the keeper is not reported
os.link(os.path.join(roots[0], "2023/a.jpg"), os.path.join(roots[0], "zz-link.jpg"))
subprocess.run([AS, "--own", tmp], check=True)  # the trees are the agent program's to change
for root in roots:
    before = {}
    for dp, _, fns in os.walk(root):
        for fn in fns:
            p = os.path.join(dp, fn)
            if not os.path.islink(p):
                before[p] = open(p, "rb").read()
    want_out, target = reference(root)
    r = subprocess.run([AS, "/app/dedupe", root], capture_output=True, text=True, timeout=60)
    if r.returncode != 0 or r.stdout.strip("\n").split("\n") != want_out:
        sys.exit(f"{root}: rc={r.returncode} got:\n{r.stdout}{r.stderr}\nwant:\n" + "\n".join(want_out))
    for p, content in before.items():
        if open(p, "rb").read() != content or os.path.islink(p):
            sys.exit(f"{p} content changed or became a symlink")
    for rel, keep in target.items():
        if os.stat(os.path.join(root, rel)).st_ino != os.stat(os.path.join(root, keep)).st_ino:
            sys.exit(f"{rel} is not hard-linked to {keep}")
    if root != roots[0] and not os.path.islink(os.path.join(root, "dangling")):
        sys.exit("symlink was touched")
print("ok")
