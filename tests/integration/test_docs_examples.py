"""Every shell, Python and TOML example of README.md and docs/*.md runs as written.

The blocks are extracted from the Markdown and run in document order (README,
then docs/CLI.md: its ``lb produce`` and ``lb run --until-end`` make the data the
later read examples read) from a scratch directory that looks like a checkout: ``.venv``
links to this one and ``.lb/services.json`` names the running services, so
relative paths in the examples (``.venv/bin/lb``, ``.lb/archive/...``) hold. The
only changes made to an example: its own topics and key namespace (``LB_TOPIC``,
``LB_TEAMS_TOPIC``, ``LB_NAMESPACE``), deleted afterwards, and port 8080 replaced by a free port.
The scratch checkout is a git repository with the project's ``.gitignore``:
after every example has run, ``git status`` must be what it was before, so no
example leaves a file behind in a person's checkout.

* A shell block runs with ``bash -eo pipefail`` and must exit 0. A command that
  runs until stopped (``lb run`` without ``--until-end``, ``lb serve``, periodic
  ``topk``/``archive``/``sketches`` loops) is started on its own, must still be
  running after a few seconds, and must exit 0 on SIGTERM; ``lb serve`` stays up
  until the end of its document, because the examples after it talk to it.
* A Python block runs with ``.venv/bin/python``; a TOML block must load as a
  game catalog.
* An HTML comment right before a block opts out, with the reason in the text:
  ``<!-- example: skip: why -->`` (never run: it starts or stops the shared
  services, or takes tens of minutes), ``<!-- example: excerpt: path -->`` (a
  quote of that source file: checked to still be in it).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from domain.games import GameCatalog
from tests.integration.streams import REPO
from tests.poll import poll

pytestmark = pytest.mark.slow

#: README first, then the command line's doc: its ``lb produce`` and ``lb run --until-end``
#: make the data the later read examples read.
DOCUMENTS = [
    "README.md",
    "CLI.md",
    *sorted(p.name for p in (REPO / "docs").glob("*.md") if p.name != "CLI.md"),
]
#: Suffixes of the topics and namespaces of examples that keep their own (API.md, TEAMS.md).
OWN = ("-podium", "-guild")
#: While writing a document, only some: ``LB_DOCS_ONLY=CLI.md,SECURITY.md`` (no totals checked).
ONLY = [name for name in os.environ.get("LB_DOCS_ONLY", "").split(",") if name]
DOCUMENTS = ONLY or DOCUMENTS
FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"<!--\s*example:\s*(skip|excerpt)\s*(?::\s*(.*?))?\s*-->")
RUN_LANGS = {"bash", "sh", "shell", "python", "toml"}
ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


@dataclass
class Block:
    doc: str
    line: int
    lang: str
    text: str
    marker: str | None = None
    argument: str = ""

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def extract(doc: str) -> list[Block]:
    """The fenced blocks of ``doc`` with the opt-out marker written just before them."""
    lines = (REPO / doc if doc == "README.md" else REPO / "docs" / doc).read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.search(before)
        blocks.append(
            Block(
                doc,
                i + 1,
                fence.group(1),
                "\n".join(lines[i + 1 : end]) + "\n",
                marker.group(1) if marker else None,
                (marker.group(2) or "") if marker else "",
            )
        )
        i = end + 1
    return blocks


def test_every_runnable_block_is_either_run_or_marked_with_a_reason() -> None:
    blocks = [b for doc in DOCUMENTS for b in extract(doc) if b.lang in RUN_LANGS]
    assert ONLY or len(blocks) > 20
    for block in blocks:
        if block.marker is not None:
            assert block.argument, f"{block.where}: a marker needs its reason or source file"
    skipped = [b for b in blocks if b.marker == "skip"]
    assert len(skipped) <= len(blocks) // 3, "skip sparingly"


def test_excerpts_still_quote_their_source() -> None:
    # Layout aside (ruff formats the dedented quote in the Markdown differently from the
    # indented source: line breaks and wrapping parentheses), the code must be the same.
    def bare(code: str) -> str:
        return re.sub(r"[\s()]", "", code)

    for block in (b for doc in DOCUMENTS for b in extract(doc) if b.marker == "excerpt"):
        source = (REPO / block.argument).read_text()
        assert bare(block.text) in bare(source), block.where


# -- running ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def long_running(command: str) -> str | None:
    """ "serve" or "loop" for a command that runs until stopped; None for one that ends."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return None
    while words and ASSIGNMENT.match(words[0]):
        words = words[1:]  # VAR=value before the command
    if not words or not words[0].endswith("/lb"):
        return None
    args = words[1:]
    if args[:1] == ["serve"] and "--new-api-key" not in args:
        return "serve"
    if args[:1] == ["run"] and not {"--until-end", "--dry-run"} & set(args):
        return "loop"
    if args[:2] in (["topk", "run"], ["archive", "run"]) and "--once" not in args:
        return "loop"
    if args[:2] == ["sketches", "publish"] and "--every" in args:
        return "loop"
    return None


class Runner:
    """Runs the blocks of one test session in a scratch checkout."""

    def __init__(self, root: Path, env: dict[str, str], port: int) -> None:
        self.root = root
        #: The runner's own files (Python examples, servers' logs), outside the checkout.
        self.own = root.parent / "runner"
        self.own.mkdir(exist_ok=True)
        self.env = env
        self.port = port
        self.servers: list[tuple[str, subprocess.Popen[bytes], Path]] = []
        self.failures: list[str] = []

    def _text(self, block: Block) -> str:
        return block.text.replace("8080", str(self.port))

    def run(self, block: Block) -> None:
        if block.lang == "toml":
            try:
                GameCatalog.from_toml(block.text, block.where)
            except Exception as exc:
                self.failures.append(f"{block.where}: {exc}")
            return
        if block.lang == "python":
            script = self.own / f"example_{block.doc}_{block.line}.py"
            script.write_text(self._text(block))
            self._finite(block, [".venv/bin/python", str(script)])
            return
        pending: list[str] = []
        for line in self._text(block).splitlines():
            kind = long_running(line)
            if kind is None:
                pending.append(line)
                continue
            self._finite(block, ["bash", "-eo", "pipefail", "-c", "\n".join(pending)])
            pending = []
            self._service(block, line, kind)
        if any(line.strip() for line in pending):
            self._finite(block, ["bash", "-eo", "pipefail", "-c", "\n".join(pending)])

    def _finite(self, block: Block, argv: list[str]) -> None:
        if argv[0] == "bash" and not argv[-1].strip():
            return
        try:
            done = subprocess.run(
                argv, cwd=self.root, env=self.env, capture_output=True, text=True, timeout=600
            )
        except subprocess.TimeoutExpired:
            self.failures.append(f"{block.where}: timed out: {argv[-1][:200]}")
            return
        if done.returncode != 0:
            self.failures.append(
                f"{block.where}: exit {done.returncode}: {argv[-1][:300]}\n"
                f"{done.stdout[-1500:]}\n{done.stderr[-1500:]}"
            )

    def _service(self, block: Block, line: str, kind: str) -> None:
        log = self.own / f"service_{block.doc}_{block.line}_{len(self.servers)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                # ``exec env`` keeps a leading VAR=value on the command (and the pid).
                ["bash", "-c", f"exec env {line}" if ASSIGNMENT.match(line) else f"exec {line}"],
                cwd=self.root,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        time.sleep(4.0)
        if proc.poll() is not None:
            self.failures.append(
                f"{block.where}: ended at once (exit {proc.returncode}): {line}\n"
                f"{log.read_text()[-1500:]}"
            )
            return
        if kind == "serve":
            self.servers.append((f"{block.where}: {line}", proc, log))
        else:
            self._stop(f"{block.where}: {line}", proc, log)

    def _stop(self, what: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        # A loaded machine can take longer than the few seconds above to import
        # and install the command's SIGTERM handler; a signal before that would
        # kill it by default (exit -15), which says nothing about the command.
        # A command that starts processes of its own (lb run --processes 2) forwards
        # the signal to them: they must have installed their handlers too.
        poll(
            "the command and its processes to handle SIGTERM",
            lambda: all(map(_handles_sigterm, [proc.pid, *_descendants(proc.pid)])),
            60,
        )
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            self.failures.append(f"{what}: did not stop within 30 s of SIGTERM")
            return
        text = log.read_text(errors="replace")
        if code != 0 or "Traceback" in text or "panicked" in text:
            self.failures.append(f"{what}: exit {code} after SIGTERM\n{text[-1500:]}")

    def end_document(self) -> None:
        while self.servers:
            self._stop(*self.servers.pop())

    def kill_everything(self) -> None:
        for _, proc, _ in self.servers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        self.servers.clear()


@pytest.fixture
def scratch(services: dict[str, Any], tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A directory that looks like a checkout, and the environment of the examples."""
    from config.settings import Settings

    base = Settings.from_env()
    root = tmp_path / "checkout"
    (root / ".lb").mkdir(parents=True)
    (root / ".venv").symlink_to(REPO / ".venv")
    recorded = base.state_dir / "services.json"
    if recorded.exists():
        (root / ".lb" / "services.json").write_text(recorded.read_text())
    (root / ".gitignore").write_text((REPO / ".gitignore").read_text())
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    uid = uuid.uuid4().hex[:8]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LB_")}
    env.update(
        LB_KAFKA_BOOTSTRAP=base.kafka_bootstrap,
        LB_REDIS_URL=base.redis_url.reveal(),
        LB_CACHE_DIR=str(base.cache_dir),
        LB_TOPIC=f"docs-{uid}",
        LB_TEAMS_TOPIC=f"docs-{uid}-teams",
        LB_NAMESPACE=f"docs{uid}",
        LB_PROGRESS_S="5",
    )
    yield root, env
    admin = AdminClient({"bootstrap.servers": base.kafka_bootstrap})
    # lb run makes the dead-letter and profiles topics beside each topic; the dense-rank
    # examples of API.md and TEAMS.md have topics and namespaces of their own.
    teams = env["LB_TEAMS_TOPIC"]
    scored = [env["LB_TOPIC"], *(f"{env['LB_TOPIC']}{own}" for own in OWN)]
    topics = [name + end for name in scored for end in ("", ".dlq", ".profiles", ".profiles.dlq")]
    topics += [teams, f"{teams}.dlq"]
    for future in admin.delete_topics(topics).values():
        with contextlib.suppress(Exception):
            future.result(timeout=30)
    import redis

    client = redis.Redis.from_url(base.redis_url.reveal())
    namespace = env["LB_NAMESPACE"]
    for pattern in (f"{namespace}:*", f"{namespace}~*:*", *(f"{namespace}{own}:*" for own in OWN)):
        for key in client.scan_iter(match=pattern, count=1000):
            client.delete(key)
    client.close()


def test_every_example_runs_as_written(scratch: tuple[Path, dict[str, str]]) -> None:
    root, env = scratch
    runner = Runner(root, env, _free_port())
    before = git_status(root)
    ran = 0
    try:
        for doc in DOCUMENTS:
            for block in extract(doc):
                if block.lang not in RUN_LANGS or block.marker is not None:
                    continue
                runner.run(block)
                ran += 1
            runner.end_document()
    finally:
        runner.kill_everything()
    assert not runner.failures, "\n\n".join(runner.failures)
    assert ran >= (1 if ONLY else 15)
    assert git_status(root) == before, "an example left files in the checkout"


def git_status(root: Path) -> list[str]:
    """``git status --porcelain`` of the scratch checkout, untracked files one by one."""
    done = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


def _descendants(pid: int) -> list[int]:
    """The running processes below ``pid`` (children, theirs, ...), from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            parents[int(entry.name)] = int(stat[1])
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, of in parents.items() if of == parent]
        found += children
        frontier += children
    return found


def _handles_sigterm(pid: int) -> bool:
    """Whether process ``pid`` catches SIGTERM now (``SigCgt`` in /proc), or has ended."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
        if line.startswith("State:") and line.split()[1] == "Z":
            return True
    return True
