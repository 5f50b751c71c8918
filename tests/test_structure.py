"""The code's shape (issue 16): no import cycle inside clawd/, SQL only in the store, files one
can read in a sitting; and the store's own guarantees that need no model: an old database
upgrades and keeps its rows, a round's record is one transaction, the adapter directory."""

from __future__ import annotations

import ast
import json
import os
import sqlite3
from pathlib import Path

import pytest

from clawd.adapter_dir import AdapterDir, AdapterDirError
from clawd.store.migrations import MIGRATIONS
from clawd.store.records import Judgment, Turn
from clawd.store.store import StorageError, Store

pytestmark = pytest.mark.fast
PKG = Path(__file__).resolve().parents[1] / "clawd"


def _module(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """clawd modules `path` imports anywhere in it (module level, in functions, under TYPE_CHECKING)."""
    name, out = _module(path), set()
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("clawd")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            if base.startswith("clawd"):
                # `from .x import y` may name the module x.y or a name in x
                out |= {f"{base}.{a.name}" for a in node.names} | {base}
    return out


def test_no_import_cycle_inside_clawd():
    files = {_module(p): p for p in PKG.rglob("*.py")}
    graph = {m: {i for i in _imports(p) if i in files and i != m} for m, p in files.items()}
    cycles, state = [], {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = "open"
        for n in graph[m]:
            if state.get(n) == "open":
                cycles.append(path[path.index(n):] + [n])
            elif n not in state:
                visit(n, [*path, n])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    # A package's __init__ importing its own submodules is how a package is made, not a cycle.
    cycles = [c for c in cycles if not any(a.startswith(b + ".") or b.startswith(a + ".") for a, b in zip(c, c[1:]))]
    assert not cycles, "import cycles: " + "; ".join(" → ".join(c) for c in cycles)


STAGES = ("serve", "judge", "train", "publish")


def test_stages_meet_only_through_the_store():
    """serve → record → judge → train → publish: the stages meet through SQLite rows and the
    adapter directory, never by importing each other (they share the engine, the store, config)."""
    crossing = []
    for stage in STAGES:
        for p in (PKG / stage).rglob("*.py"):
            crossing += [f"{_module(p)} imports {i}" for i in sorted(_imports(p))
                         if len(i.split(".")) > 1 and i.split(".")[1] in STAGES and i.split(".")[1] != stage]
    assert not crossing, crossing


def test_sql_lives_in_the_store_and_files_stay_readable():
    for p in PKG.rglob("*.py"):
        text = p.read_text()
        if p.name not in ("store.py",):
            assert "sqlite3.connect" not in text, f"{p}: SQL belongs in clawd/store/store.py"
        assert len(text.splitlines()) <= 460, f"{p} has {len(text.splitlines())} lines: split it by job"


def _turn(store: Store, session: int, i: int) -> Turn:
    t = Turn(session_id=session, index=i, kind="main", completion_id=f"c{i}", request={"messages": []},
             prompt_ids=[1, 2, 3])
    store.insert_turn(t)
    t.completion_ids, t.logprobs, t.text, t.status, t.finish_reason = [4, 5], [-0.1, -0.2], "hi", "ok", "stop"
    store.finish_turn(t)
    return t


def test_an_old_database_upgrades_and_keeps_its_rows(tmp_path):
    path = tmp_path / "clawd.db"
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied REAL NOT NULL)")
    for name, sql in MIGRATIONS[:2]:  # a database from before the 'ask' judge and feedback hints
        con.executescript(f"BEGIN; {sql}; INSERT INTO _migrations VALUES ('{name}', 0); COMMIT;")
    con.execute("INSERT INTO sessions (key, first_seen, last_seen) VALUES ('s', 0, 0)")
    con.execute("INSERT INTO turns (session_id, idx, kind, completion_id, request, prompt_ids, completion_ids,"
                " logprobs, text, status, created) VALUES (1, 0, 'main', 'old', '{}', x'', x'', x'', 'kept', 'ok', 0)")
    con.execute("INSERT INTO judgments (turn_id, method, score, judge_model, created) VALUES (1, 'score', -1, 'm', 0)")
    con.execute("INSERT INTO feedback (turn_id, score, created) VALUES (1, 1, 0)")
    con.close()

    store = Store(path)
    assert store.turn(1).text == "kept"
    assert store.judgment(1).score == -1 and store.feedback(1).score == 1
    done = [r[0] for r in store._read("SELECT name FROM _migrations ORDER BY name")]
    assert done == [name for name, _ in MIGRATIONS]
    # the rebuilt judgments table takes the new method; feedback has its hint column
    j = Judgment(turn_id=_turn(store, 1, 1).id, method="ask", score=1, judge_model="m")
    assert store.add_judgment(j)
    store.close()


def test_a_rounds_record_is_one_transaction(tmp_path):
    store = Store(tmp_path / "clawd.db")
    sid = store.open_session("s")
    turns = [_turn(store, sid, i).id for i in range(3)]
    run = store.start_run("rl", turns, None)
    with pytest.raises(sqlite3.IntegrityError):  # a turn id that does not exist: the whole record is refused
        store.record_round(run, 1, str(tmp_path / "0001"), None, {"version": 1}, [*turns, 999], {"loss": 1.0})
    assert store.adapters() == [] and store._read("SELECT COUNT(*) FROM train_uses")[0][0] == 0
    assert store._read("SELECT status FROM train_runs WHERE id = ?", (run,))[0][0] == "running"
    store.record_round(run, 1, str(tmp_path / "0001"), None, {"version": 1}, turns, {"loss": 1.0})
    store.record_round(run, 1, str(tmp_path / "0001"), None, {"version": 1}, turns, {"loss": 1.0})  # a resume: same rows
    assert [a.version for a in store.adapters()] == [1] and store.max_adapter_version() == 1
    assert store._read("SELECT status, adapter_version FROM train_runs WHERE id = ?", (run,))[0][:] == ("done", 1)
    store.close()


def test_a_full_disk_in_a_round_record_is_a_storage_error(tmp_path):
    store = Store(tmp_path / "clawd.db")
    sid = store.open_session("s")
    turns = [_turn(store, sid, 0).id]
    run = store.start_run("rl", turns, None)
    store._db.execute("PRAGMA max_page_count = 1")  # what SQLITE_FULL looks like, on any file system
    big = {"blob": "x" * 200_000}
    with pytest.raises(StorageError, match="cannot write the database"):
        store.record_round(run, 1, "p", None, big, turns, {})
    store._db.execute("PRAGMA max_page_count = 1073741823")
    assert store.adapters() == []
    store.close()


def test_the_adapter_directory(tmp_path):
    d = AdapterDir(tmp_path)
    assert d.current() is None and d.versions() == [] and d.next_version() == 1
    with pytest.raises(ZeroDivisionError):
        d.write(1, lambda tmp: (tmp / "adapter_config.json").write_text("{}") and 1 / 0)
    assert not any(tmp_path.joinpath("adapters").iterdir()), "a failed write leaves nothing behind"
    d.write(1, lambda tmp: (tmp / "adapter_config.json").write_text("{}"))
    d.dir(2).mkdir()  # a version another writer started: not whole, but its number is taken
    assert d.versions() == [1] and d.is_complete(1) and not d.is_complete(2)
    assert d.next_version() == 3 and d.next_version(known=7) == 8
    d.set_current(1)
    assert d.current() == 1 and os.readlink(d.root / "current") == "0001"
    d.set_current(None)
    assert d.current() is None
    os.symlink("elsewhere", d.root / "current")
    assert d.current() is None  # names no version: the base weights, as the daemon serves
    with d.exclusive():
        with pytest.raises(AdapterDirError, match="another training round"):
            with d.exclusive():
                pass
    assert json.loads((d.dir(1) / "adapter_config.json").read_text()) == {}


def test_one_sse_reader():
    from clawd.client import IncompleteStream, sse_events

    lines = ['data: {"id": "a", "choices": []}', "", ": keep-alive", 'data: {"error": {"message": "x"}}', "data: [DONE]",
             'data: {"after": "done"}']
    assert list(sse_events(lines)) == [{"id": "a", "choices": []}, {"error": {"message": "x"}}]
    with pytest.raises(IncompleteStream):
        list(sse_events(lines[:2]))


def test_the_default_model_is_the_assembled_one_while_its_stamp_holds(tmp_path, monkeypatch):
    from clawd.config import DEFAULT_MODEL_FILE, Settings, bundled_model_path

    monkeypatch.delenv("CLAWD_MODEL", raising=False)  # conftest pins the suite to SmolLM2
    monkeypatch.setenv("CLAWD_MODELS", str(tmp_path))
    assert Settings(home=tmp_path / "h").resolved_model() == bundled_model_path()  # nothing assembled: the fallback
    gguf = tmp_path / DEFAULT_MODEL_FILE
    gguf.write_bytes(b"GGUF" + bytes(60))
    st = gguf.stat()
    (tmp_path / (DEFAULT_MODEL_FILE + ".verified")).write_text(f"abc {st.st_size} {int(st.st_mtime)}\n")
    assert Settings(home=tmp_path / "h").resolved_model() == gguf
    os.utime(gguf, (st.st_atime, st.st_mtime + 10))  # changed since it was verified: not served
    assert Settings(home=tmp_path / "h").resolved_model() == bundled_model_path()
