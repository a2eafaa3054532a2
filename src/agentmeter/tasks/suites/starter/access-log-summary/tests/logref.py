"""Generator of access logs and the reference summary for the access-log-summary task."""
import collections
import random
import re

LINE = re.compile(r'^(\S+) \S+ \S+ \[[^\]]+\] "(\S+) (\S+) [^"]*" (\d{3}) (\d+|-) "[^"]*" "[^"]*"$')


def generate(seed: int, n: int) -> str:
    r = random.Random(seed)
    ips = [f"10.0.{r.randint(0, 3)}.{r.randint(1, 40)}" for _ in range(12)] + ["192.168.1.9", "10.0.0.100"]
    paths = ["/", "/index.html", "/api/items", "/api/items?page=2", "/api/items?page=3",
             "/login", "/static/app.js", "/api/users/7", "/health"]
    out = []
    for i in range(n):
        if r.random() < 0.04:
            out.append(r.choice(["garbage line", "", '10.0.0.1 - - [bad', "- - - - - -"]))
            continue
        ip = r.choice(ips[: 3 + seed % 9]) if r.random() < 0.7 else r.choice(ips)
        st = r.choices([200, 201, 301, 404, 500, 502, 503], [50, 5, 5, 10, 3, 2, 2])[0]
        size = "-" if r.random() < 0.1 else str(r.randint(0, 50000))
        m = r.choice(["GET", "GET", "POST", "PUT"])
        out.append(f'{ip} - - [10/Oct/2023:13:{i % 60:02d}:{r.randint(0, 59):02d} +0000] '
                   f'"{m} {r.choice(paths)} HTTP/1.1" {st} {size} "-" "Mozilla/5.0 (X11; Linux)"')
    return "\n".join(out) + "\n"


def summarize(text: str) -> str:
    ips: collections.Counter[str] = collections.Counter()
    paths: collections.Counter[str] = collections.Counter()
    total = bad = s5 = nbytes = 0
    for line in text.split("\n"):
        if line == "":
            continue
        m = LINE.match(line)
        if not m:
            bad += 1
            continue
        total += 1
        ips[m.group(1)] += 1
        paths[m.group(3).split("?", 1)[0]] += 1
        if m.group(4).startswith("5"):
            s5 += 1
        if m.group(5) != "-":
            nbytes += int(m.group(5))
    top = sorted(ips.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    top_path = sorted(paths.items(), key=lambda kv: (-kv[1], kv[0]))[0][0] if paths else "-"
    return "\n".join([
        f"total_requests {total}",
        f"malformed {bad}",
        f"unique_ips {len(ips)}",
        "top_ips " + ",".join(f"{k}:{v}" for k, v in top),
        f"status_5xx {s5}",
        f"bytes_total {nbytes}",
        f"top_path {top_path}",
    ]) + "\n"
