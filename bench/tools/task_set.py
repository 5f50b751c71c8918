"""The tool tasks: small jobs for OpenClaw's own tools (exec, read, write, edit, ls) and chains of two.

Each task is a user message, the files its workspace starts with, the tools a right answer runs
(in order), a check of the outcome made after the agent finished, and the calls a correct agent
would make (what the oracle backend plays, and what the self-test applies by hand) with the
reply it ends on. The tokens in the files and messages are made up so that no model can pass a
check by guessing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Outcome:
    """What an agent left behind: the workspace, its final answer, the text of every tool result."""
    workspace: Path
    answer: str = ""
    tool_outputs: list[str] = field(default_factory=list)

    def text(self, path: str) -> str | None:
        p = self.workspace / path
        return p.read_text(errors="replace") if p.is_file() else None

    def seen(self) -> str:
        return "\n".join([self.answer, *self.tool_outputs])


Check = Callable[[Outcome], str | None]  # None when the outcome is right, else what is wrong


@dataclass(frozen=True)
class Task:
    name: str
    message: str
    files: dict[str, str]
    steps: tuple[frozenset[str], ...]  # each step: the tool names that do it (ls may be `exec ls`)
    check: Check
    oracle: tuple[tuple[str, dict], ...]  # (tool, arguments) a correct agent calls, in order
    reply: str = ""  # what the oracle says at the end besides echoing the last tool result

    @property
    def kind(self) -> str:
        return self.name.split("_", 1)[0]

    def setup(self, workspace: Path) -> None:
        """Fill an empty workspace with this task's files."""
        for rel, text in self.files.items():
            p = workspace / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)


EXEC, READ, WRITE, LS = frozenset({"exec"}), frozenset({"read"}), frozenset({"write"}), frozenset({"ls", "exec"})
EDIT = frozenset({"edit", "apply_patch"})


# ---- checks ----------------------------------------------------------------------------------
def seen(*needles: str) -> Check:
    """Each needle is in the answer or in a tool's output (a command's result counts as shown)."""
    def check(o: Outcome) -> str | None:
        missing = [n for n in needles if n not in o.seen()]
        return f"{missing} in neither the answer nor a tool output" if missing else None
    return check


def answered(*needles: str) -> Check:
    """Each needle is in the final answer: the agent told the user what it found."""
    def check(o: Outcome) -> str | None:
        missing = [n for n in needles if n.lower() not in o.answer.lower()]
        return f"{missing} not in the answer" if missing else None
    return check


def answered_any(*choices: str) -> Check:
    """One of the choices is in the final answer (a number as digits or as a word)."""
    def check(o: Outcome) -> str | None:
        return None if any(c.lower() in o.answer.lower() for c in choices) else f"none of {list(choices)} in the answer"
    return check


def file_is(path: str, want: str) -> Check:
    """The file holds exactly this text (surrounding whitespace aside)."""
    def check(o: Outcome) -> str | None:
        got = o.text(path)
        if got is None:
            return f"{path} does not exist"
        return None if got.strip() == want.strip() else f"{path} holds {got[:200]!r}, not {want!r}"
    return check


def file_lines(path: str, want: list[str]) -> Check:
    """The file's non-blank lines, stripped, are these."""
    def check(o: Outcome) -> str | None:
        got = o.text(path)
        if got is None:
            return f"{path} does not exist"
        lines = [x.strip() for x in got.splitlines() if x.strip()]
        return None if lines == want else f"{path} has lines {lines[:10]}, not {want}"
    return check


def file_json(path: str, want: object) -> Check:
    def check(o: Outcome) -> str | None:
        got = o.text(path)
        if got is None:
            return f"{path} does not exist"
        try:
            value = json.loads(got)
        except ValueError:
            return f"{path} is not JSON: {got[:200]!r}"
        return None if value == want else f"{path} holds {value!r}, not {want!r}"
    return check


def exists(path: str) -> Check:
    return lambda o: None if (o.workspace / path).exists() else f"{path} does not exist"


def both(*checks: Check) -> Check:
    def check(o: Outcome) -> str | None:
        return next((why for c in checks if (why := c(o))), None)
    return check


# ---- the tasks ---------------------------------------------------------------------------------
SETUP_CFG = "[metadata]\nname = tidepool\nversion = 1.2.3\nlicense = MIT\n"
APP_PY = "import os\n\nDEBUG = False\nPORT = int(os.environ.get('PORT', '8080'))\n"

TASKS: list[Task] = [
    Task("exec_echo", "Run the shell command `echo tt-7341-ok` and tell me what it printed.", {},
         (EXEC,), seen("tt-7341-ok"), (("exec", {"command": "echo tt-7341-ok"}),)),
    Task("exec_wc", "Count the lines of data.txt by running `wc -l data.txt` in the shell.",
         {"data.txt": "".join(f"row {i}\n" for i in range(1, 1235))},
         (EXEC,), seen("1234"), (("exec", {"command": "wc -l data.txt"}),)),
    Task("exec_mkdir", "Run `mkdir -p build && touch build/done.flag` in the shell.", {},
         (EXEC,), exists("build/done.flag"), (("exec", {"command": "mkdir -p build && touch build/done.flag"}),)),
    Task("exec_python", "Run `python3 calc.py` and tell me the number it prints.",
         {"calc.py": "print(sum(range(1, 38)))\n"},
         (EXEC,), seen("703"), (("exec", {"command": "python3 calc.py"}),)),
    Task("exec_grep", "Show me the lines of server.log that contain ERROR, using `grep ERROR server.log`.",
         {"server.log": "INFO start\nERROR disk-a17\nINFO ok\nWARN slow\nERROR net-b22\nINFO stop\n"},
         (EXEC,), seen("ERROR disk-a17", "ERROR net-b22"), (("exec", {"command": "grep ERROR server.log"}),)),
    Task("exec_redirect", "Use the shell to run `echo quartz-19 > stone.txt`.", {},
         (EXEC,), file_is("stone.txt", "quartz-19"), (("exec", {"command": "echo quartz-19 > stone.txt"}),)),
    Task("read_codeword", "Read note.txt and tell me the code word in it.",
         {"note.txt": "Meeting moved to Thursday.\nThe code word is marigold-58.\n"},
         (READ,), answered("marigold-58"), (("read", {"path": "note.txt"}),)),
    Task("read_port", "Read config.ini and tell me which port the server listens on.",
         {"config.ini": "[server]\nhost = 0.0.0.0\nport = 8125\nworkers = 4\n"},
         (READ,), answered("8125"), (("read", {"path": "config.ini"}),)),
    Task("read_title", "Read docs/guide.md and tell me its title.",
         {"docs/guide.md": "# The Zebra Handbook\n\nChapter one: stripes.\n"},
         (READ,), answered("Zebra Handbook"), (("read", {"path": "docs/guide.md"}),)),
    Task("read_third", "Read list.txt and tell me the third item on it.",
         {"list.txt": "1. amber\n2. basalt\n3. cobalt\n4. dune\n"},
         (READ,), answered("cobalt"), (("read", {"path": "list.txt"}),)),
    Task("write_hello", "Create a file hello.txt that contains exactly: hello world", {},
         (WRITE,), file_is("hello.txt", "hello world"), (("write", {"path": "hello.txt", "content": "hello world\n"}),)),
    Task("write_nested", "Write the text 4096 into a new file out/result.txt.", {},
         (WRITE,), file_is("out/result.txt", "4096"), (("write", {"path": "out/result.txt", "content": "4096\n"}),)),
    Task("write_json", 'Create settings.json holding this JSON: {"debug": true, "level": 3}', {},
         (WRITE,), file_json("settings.json", {"debug": True, "level": 3}),
         (("write", {"path": "settings.json", "content": '{"debug": true, "level": 3}\n'}),)),
    Task("write_lines", "Create colors.txt with three lines: red, green, blue (one color a line).", {},
         (WRITE,), file_lines("colors.txt", ["red", "green", "blue"]),
         (("write", {"path": "colors.txt", "content": "red\ngreen\nblue\n"}),)),
    Task("edit_word", "In greeting.txt, replace the word World with OpenClaw.", {"greeting.txt": "Hello, World!\n"},
         (EDIT,), file_is("greeting.txt", "Hello, OpenClaw!"),
         (("edit", {"path": "greeting.txt", "edits": [{"oldText": "World", "newText": "OpenClaw"}]}),)),
    Task("edit_version", "Change the version in setup.cfg from 1.2.3 to 1.2.4.", {"setup.cfg": SETUP_CFG},
         (EDIT,), file_is("setup.cfg", SETUP_CFG.replace("1.2.3", "1.2.4")),
         (("edit", {"path": "setup.cfg", "edits": [{"oldText": "version = 1.2.3", "newText": "version = 1.2.4"}]}),)),
    Task("edit_flag", "In app.py, set DEBUG to True.", {"app.py": APP_PY},
         (EDIT,), file_is("app.py", APP_PY.replace("DEBUG = False", "DEBUG = True")),
         (("edit", {"path": "app.py", "edits": [{"oldText": "DEBUG = False", "newText": "DEBUG = True"}]}),)),
    Task("edit_todo", "Mark the milk item in todo.md as done (turn its [ ] into [x]).",
         {"todo.md": "- [ ] buy milk\n- [ ] call Ana\n"},
         (EDIT,), file_is("todo.md", "- [x] buy milk\n- [ ] call Ana"),
         (("edit", {"path": "todo.md", "edits": [{"oldText": "- [ ] buy milk", "newText": "- [x] buy milk"}]}),)),
    Task("ls_csv", "List the files in the current directory and tell me which one is a .csv file.",
         {"alpha.txt": "a\n", "beta-77.csv": "x,y\n", "gamma.log": "g\n"},
         (LS,), answered("beta-77.csv"), (("ls", {}),)),
    Task("ls_count", "List the directory src and tell me how many files it contains.",
         {"src/main.c": "int main(void) { return 0; }\n", "src/util.c": "\n", "src/util.h": "\n", "README": "r\n"},
         (LS,), answered_any("3", "three"), (("ls", {"path": "src"}),), "src holds 3 files."),
    Task("chain_write_read", "Write the text ping-913 to a file token.txt, then read the file back and tell me "
         "what it says.", {},
         (WRITE, READ), both(file_is("token.txt", "ping-913"), answered("ping-913")),
         (("write", {"path": "token.txt", "content": "ping-913\n"}), ("read", {"path": "token.txt"}))),
    Task("chain_ls_read", "There is one file in the notes directory. Find it, read it, and tell me which room "
         "the meeting is in.", {"notes/minutes-0412.txt": "Standup moved to room 7B-east.\n"},
         (LS, READ), answered("7B-east"),
         (("ls", {"path": "notes"}), ("read", {"path": "notes/minutes-0412.txt"}))),
    Task("chain_read_edit", "Read price.txt, then change the price in it to 20.", {"price.txt": "item: lamp\nprice: 15\n"},
         (READ, EDIT), file_is("price.txt", "item: lamp\nprice: 20"),
         (("read", {"path": "price.txt"}), ("edit", {"path": "price.txt", "edits": [{"oldText": "price: 15",
                                                                                      "newText": "price: 20"}]}))),
    Task("chain_exec_read", "Run `echo $((17 * 23)) > product.txt` in the shell, then read product.txt and tell me "
         "the number in it.", {},
         (EXEC, READ), both(file_is("product.txt", "391"), answered("391")),
         (("exec", {"command": "echo $((17 * 23)) > product.txt"}), ("read", {"path": "product.txt"}))),
]
