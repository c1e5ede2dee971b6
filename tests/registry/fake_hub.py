"""A loopback HTTP server that answers the Hugging Face Hub's file endpoints from folders under `hub/repos/` (written by hub/make_repos.py).

It serves what `huggingface_hub` (hf_hub_download, get_hf_file_metadata, get_safetensors_metadata) asks for:
HEAD and GET `/{org}/{name}/resolve/{revision}/{file}` with `X-Repo-Commit`, `ETag`, `X-Linked-Size` and the
`X-Error-Code` answers of the real Hub (RepoNotFound, GatedRepo, EntryNotFound, RevisionNotFound), and HTTP
range requests, and `GET /api/models/{org}/{name}/tree/{revision}` (the file list). A repo folder may hold
`_repo.json`:

    {"commit": "<40 hex>", "revisions": {"v1": "<40 hex>"}, "gated_token": "hf_x", "delay_s": 5,
     "sizes": {"config.json": 100000000}}

A file named `X.safetensors.header` is served as the safetensors file `X.safetensors`: its 8-byte length, the
header text as written (so a malformed header can be served), and a length the header's offsets imply.
Every request is logged in `server.requests` as (method, path, range).
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPOS = Path(__file__).parent / "hub" / "repos"
DEFAULT_COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _repo_meta(folder: Path) -> dict[str, Any]:
    meta = folder / "_repo.json"
    return json.loads(meta.read_text()) if meta.is_file() else {}


def _safetensors_bytes(header_file: Path) -> tuple[bytes, int]:
    """(the bytes served for the header part, the full file length the header implies)."""
    text = header_file.read_bytes()
    try:
        data = json.loads(text)
        end = max((v["data_offsets"][1] for k, v in data.items() if k != "__metadata__"), default=0)
    except (ValueError, KeyError, TypeError, AttributeError):
        end = 0
    head = struct.pack("<Q", len(text)) + text
    return head, len(head) + int(end)


class _Handler(BaseHTTPRequestHandler):
    server: FakeHub

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _error(self, status: int, code: str, message: str) -> None:
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _tree(self, parts: list[str], body: bool) -> None:
        """`GET /api/models/{org}/{name}/tree/{revision}`: the repo's files (what list_repo_files reads)."""
        folder = self.server.root / parts[2] / parts[3]
        if not folder.is_dir():
            self._error(401, "RepoNotFound", "Repository not found")
            return
        entries = [
            {"type": "file", "path": p.relative_to(folder).as_posix(), "size": p.stat().st_size, "oid": "0" * 40}
            for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != "_repo.json"
        ]
        data = json.dumps(entries).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def _answer(self, body: bool) -> None:
        self.server.requests.append((self.command, self.path, self.headers.get("range")))
        parts = self.path.split("?")[0].strip("/").split("/")
        if len(parts) >= 6 and parts[:2] == ["api", "models"] and parts[4] == "tree":
            self._tree(parts, body)
            return
        if len(parts) < 5 or parts[2] != "resolve":
            self._error(404, "RepoNotFound", "Not found")
            return
        org, name, _, revision = parts[:4]
        file_name = "/".join(parts[4:])
        folder = self.server.root / org / name
        if not folder.is_dir():
            self._error(401, "RepoNotFound", "Repository not found")
            return
        meta = _repo_meta(folder)
        if meta.get("delay_s"):
            time.sleep(float(meta["delay_s"]))
        token = meta.get("gated_token")
        if token and self.headers.get("authorization") != f"Bearer {token}":
            self._error(401, "GatedRepo", "Access to model is restricted. You must have access to it.")
            return
        commit = meta.get("commit", DEFAULT_COMMIT)
        revisions = {"main": commit, commit: commit, **meta.get("revisions", {})}
        if revision not in revisions:
            self._error(404, "RevisionNotFound", "Invalid rev id")
            return
        commit = revisions[revision]
        path = folder / file_name
        total: int
        if path.is_file() and path.name != "_repo.json":
            content = path.read_bytes()
            total = len(content)
        elif file_name.endswith(".safetensors") and (folder / (file_name + ".header")).is_file():
            content, total = _safetensors_bytes(folder / (file_name + ".header"))
        else:
            self._error(404, "EntryNotFound", "Entry not found")
            return
        total = int(meta.get("sizes", {}).get(file_name, total))
        etag = '"' + hashlib.sha256(content + commit.encode()).hexdigest() + '"'
        wanted = self.headers.get("range")
        start, end = 0, total - 1
        if wanted and wanted.startswith("bytes="):
            first, _, last = wanted[6:].partition("-")
            start = int(first)
            end = min(int(last) if last else total - 1, total - 1)
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{total}")
        else:
            self.send_response(200)
        chunk = content[start : end + 1]
        if body and len(chunk) < end + 1 - start:  # past the served prefix: zeros (a header-only fixture)
            chunk += bytes(min(end + 1 - start - len(chunk), 1 << 20))
        self.send_header("X-Repo-Commit", commit)
        self.send_header("ETag", etag)
        if file_name.endswith(".safetensors"):
            self.send_header("X-Linked-Etag", etag)
            self.send_header("X-Linked-Size", str(total))
        self.send_header("Content-Length", str(len(chunk) if body else end + 1 - start))
        self.end_headers()
        if body:
            self.wfile.write(chunk)


class FakeHub(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path = REPOS) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root
        self.requests: list[tuple[str, str, str | None]] = []
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
