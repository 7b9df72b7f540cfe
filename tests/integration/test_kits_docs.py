"""Every Go, Java and shell example of docs/CLIENTS.md and the kits' READMEs runs as written.

A Go example is a program: it runs with ``go run`` in a module of its own that
points at ``clients/go`` with a ``replace`` directive, as a game server's would.
A Java example runs as a single source file on the kit's classpath. A shell
block of a kit's README runs with ``bash -eo pipefail`` in a copy of that kit
(beside a copy of ``schemas/``), so nothing is built into the checkout. Every
example writes to this test's topic; the records must all be there afterwards,
and ``git status`` of ``clients/`` must not have changed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from tests.integration.streams import KEYS, REPO
from tests.integration.test_kits_end_to_end import JAVA_DIR, build_kits, read_topic

FENCE = re.compile(r"^```(\w*)\s*$")
DOCS = ["docs/CLIENTS.md", "clients/go/README.md", "clients/java/README.md"]
#: Records each example writes (the docs' one event; the READMEs' ``-count 500``).
EXPECTED_RECORDS = {
    "docs/CLIENTS.md": 2,
    "clients/go/README.md": 500,
    "clients/java/README.md": 500,
}


def blocks(doc: str) -> list[tuple[int, str, str]]:
    """(line, language, text) of every fenced block of ``doc``."""
    lines = (REPO / doc).read_text().splitlines()
    out = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        out.append((i + 1, fence.group(1), "\n".join(lines[i + 1 : end]) + "\n"))
        i = end + 1
    return out


def git_status() -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all", "--", "clients"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def run(argv: list[str], cwd: Path, env: dict[str, str], where: str) -> None:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (
        f"{where}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    )


def go_example(text: str, work: Path, env: dict[str, str], where: str) -> None:
    work.mkdir()
    (work / "main.go").write_text(text)
    (work / "go.mod").write_text(
        "module example\n\ngo 1.26\n\nrequire leaderboard/clients/go v0.0.0\n\n"
        f"replace leaderboard/clients/go => {REPO / 'clients' / 'go'}\n"
    )
    shutil.copy(REPO / "clients" / "go" / "go.sum", work / "go.sum")
    run(["go", "run", "."], work, {**env, "GOFLAGS": "-mod=mod -buildvcs=false"}, where)


def java_example(text: str, work: Path, env: dict[str, str], where: str) -> None:
    work.mkdir()
    name = re.search(r"public class (\w+)", text)
    assert name, f"{where}: a Java example is one public class with a main"
    source = work / f"{name.group(1)}.java"
    source.write_text(text)
    classpath = (JAVA_DIR / "target" / "classpath.txt").read_text().strip()
    run(
        ["java", "-cp", f"{JAVA_DIR / 'target' / 'classes'}:{classpath}", str(source)],
        work,
        env,
        where,
    )


def test_every_kit_example_runs_as_written(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    build_kits()
    before = git_status()
    copy = tmp_path / "checkout"
    shutil.copytree(
        REPO / "schemas", copy / "schemas", ignore=shutil.ignore_patterns("__pycache__")
    )
    # The copies keep the build outputs kits.sh made (and their times), so Maven finds
    # its classes up to date and only runs the tests again.
    for kit in ("go", "java"):
        shutil.copytree(REPO / "clients" / kit, copy / "clients" / kit)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LB_")}
    env.update(LB_KAFKA_BOOTSTRAP=kafka_bootstrap, LB_TOPIC=topic, LB_HMAC_KEYS=KEYS)

    ran = {doc: 0 for doc in DOCS}
    for doc in DOCS:
        for line, lang, text in blocks(doc):
            where = f"{doc}:{line}"
            work = tmp_path / f"example-{Path(doc).parent.name}-{line}"
            if lang == "go":
                go_example(text, work, env, where)
            elif lang == "java":
                java_example(text, work, env, where)
            elif lang == "bash" and doc != "docs/CLIENTS.md":
                kit_dir = copy / Path(doc).parent
                run(["bash", "-eo", "pipefail", "-c", text], kit_dir, env, where)
            else:
                continue  # CLIENTS.md's shell blocks run in test_docs_examples.py
            ran[doc] += 1
    assert ran == {"docs/CLIENTS.md": 2, "clients/go/README.md": 2, "clients/java/README.md": 2}

    assert len(read_topic(kafka_bootstrap, topic)) == sum(EXPECTED_RECORDS.values())
    assert git_status() == before, "an example changed files under clients/"
