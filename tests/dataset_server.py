"""A registry and git repositories served on loopback, as Harbor's registry and GitHub serve them:
``/registry.json`` and ``/git/<repo>.git`` (smart HTTP through ``git http-backend``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HTTP_BACKEND = "/usr/lib/git-core/git-http-backend"
GIT_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LANG": "C",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True,
                          capture_output=True, text=True).stdout.strip()


def make_repo(root: Path, name: str, files: dict[str, str | Path],
              links: dict[str, str] | None = None) -> tuple[Path, str]:
    """A bare repository ``root/<name>.git`` of one commit: ``files`` (text, or a directory to
    copy) and ``links`` (symlinks); returns it and the commit."""
    work = root / f"{name}-work"
    work.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=work)
    for rel, content in files.items():
        dest = work / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copytree(content, dest)
        else:
            dest.write_text(content)
    for rel, target in (links or {}).items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).symlink_to(target)
    git("add", "-A", cwd=work)
    git("commit", "-qm", "tasks", cwd=work)
    commit = git("rev-parse", "HEAD", cwd=work)
    bare = root / f"{name}.git"
    git("clone", "-q", "--bare", str(work), str(bare), cwd=root)
    # what GitHub allows: fetching a commit by its id, filtered
    git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=bare)
    git("config", "uploadpack.allowFilter", "true", cwd=bare)
    shutil.rmtree(work)
    return bare, commit


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._serve()

    def do_POST(self) -> None:  # noqa: N802
        self._serve()

    def _serve(self) -> None:
        path, _, query = self.path.partition("?")
        if path == "/registry.json":
            body = self.server.registry
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if not path.startswith("/git/"):
            self.send_error(404)
            return
        length = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(length) if length else b""
        env = {**GIT_ENV, "GIT_PROJECT_ROOT": str(self.server.root), "GIT_HTTP_EXPORT_ALL": "1",
               "PATH_INFO": path[len("/git"):], "QUERY_STRING": query,
               "REQUEST_METHOD": self.command, "REMOTE_ADDR": "127.0.0.1",
               "CONTENT_TYPE": self.headers.get("Content-Type", ""),
               "CONTENT_LENGTH": str(len(data)),
               "GIT_PROTOCOL": self.headers.get("Git-Protocol", "")}
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        out = subprocess.run([HTTP_BACKEND], input=data, env=env, capture_output=True).stdout
        head, _, body = out.partition(b"\r\n\r\n")
        status = 200
        headers: list[tuple[str, str]] = []
        for line in head.decode("latin-1").split("\r\n"):
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.split()[0])
            elif key:
                headers.append((key, value.strip()))
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path, registry: list[dict[str, Any]]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root
        self.registry = json.dumps(registry).encode()


@contextmanager
def serve(root: Path, registry: list[dict[str, Any]]) -> Iterator[str]:
    """Serve ``root``'s bare repositories and ``registry``; yields the base URL. ``registry``
    may name repositories as ``{base}/git/<name>.git``: ``{base}`` is filled in."""
    server = _Server(root, [])
    base = f"http://127.0.0.1:{server.server_address[1]}"
    server.registry = json.dumps(registry).replace("{base}", base).encode()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield base
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
