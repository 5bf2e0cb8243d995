"""The README's map of concepts to files names files that exist, its links resolve, and the
commands of README.md, config/README.md and docs/*.md work as written."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest

from leviathan import layout
from leviathan.provenance import ALLOW_FOREIGN_ENV

ROOT = Path(__file__).resolve().parents[1]


def _map_section() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Where things are")
    return readme[start : readme.index("\n## ", start + 1)]


def test_readme_map_names_existing_files() -> None:
    named = [p for p in re.findall(r"`([^`\s]+)`", _map_section()) if "/" in p and "<" not in p]
    assert len(named) > 10
    missing = [
        p
        for p in named
        if not any((base / p.rstrip("/")).exists() for base in (ROOT, ROOT / "src" / "leviathan"))
        and not any(ROOT.glob(p))
    ]
    assert not missing, f"README's map names files that do not exist: {missing}"


def test_readme_links_to_docs_resolve() -> None:
    links = re.findall(r"\]\((docs/[^)]+)\)", (ROOT / "README.md").read_text())
    assert {"docs/dvc.md", "docs/slurm.md", "docs/gpu.md"} <= set(links)
    for link in links:
        path, _, anchor = link.partition("#")
        assert (ROOT / path).is_file(), link
        if anchor:  # GitHub's heading anchors: lower case, punctuation dropped, spaces to '-'
            headings = re.findall(r"^#+ (.+)$", (ROOT / path).read_text(), re.M)
            slugs = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}
            assert anchor in slugs, link


def _edges(mermaid: str, names: dict[str, str] | None = None) -> set[tuple[str, str]]:
    pairs = re.findall(r"^\s*(\w+)\s*-->\s*(\w+)\s*$", mermaid, re.M)
    names = names or {}
    return {(names.get(a, a), names.get(b, b)) for a, b in pairs}


def test_the_readmes_dag_is_snakemakes_rulegraph() -> None:
    """The README's picture of the DAG has exactly the edges of `snakemake --rulegraph` on the
    default config."""
    import subprocess
    import sys

    readme = (ROOT / "README.md").read_text()
    picture = re.search(r"```mermaid\n(.*?)```", readme, re.S).group(1)
    snakemake = Path(sys.executable).parent / "snakemake"
    env = {**os.environ, ALLOW_FOREIGN_ENV: "1"}
    graph = subprocess.run(
        [str(snakemake), "--rulegraph", "mermaid-js", "--cores", "1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert graph.returncode == 0, graph.stderr[-2000:]
    names = dict(re.findall(r"^\s*(id\d+)\[(\w+)\]", graph.stdout, re.M))
    expected = _edges(graph.stdout, names)
    assert len(expected) > 10
    assert _edges(picture) == expected


# ----------------------------------------------------------------------------- the docs' commands
# Every shell command of README.md, config/README.md and docs/*.md (```bash blocks), checked by
# the tool's own parser (leviathan, snakemake, dvc, make), the cheap ones run, and the Snakemake
# ones dry-run in a copy of the workflow (slow). A command here that no rule covers fails.
DOCS = [ROOT / "README.md", ROOT / "config" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# programs whose commands need what a test cannot have (a cluster, a remote, a finished run, an
# editor, the network), each with why; anything else must be one of the checked ones below
UNCHECKED = {
    "pip": "installs packages",
    "mkdir": "plain shell",
    "cp": "plain shell",
    "$EDITOR": "an editor",
    "tail": "follows a running job's files",
    "tensorboard": "a server (tensorboard is not a dependency)",
    "torchrun": "several processes; its leviathan arguments are checked below",
    "python": "python -m leviathan.torchrun: as torchrun",
    "lm_eval": "lm-eval's own CLI on an export",
    "leviathan-lm-eval": "lm-eval's CLI (its flags are lm-eval's)",
    "sbatch": "a SLURM cluster",
    "tmux": "a terminal session that outlives the login",
}
CHECKED = {"leviathan", "snakemake", "dvc", "make"}
# files a document defines in a YAML block just before using them (name -> the doc holding it)
EXAMPLE_FILES = {"my_study.yaml": ROOT / "README.md"}


def doc_commands() -> list[tuple[str, str]]:
    """(document, command) for each command of the README's table of goals and each command
    line of the documents' bash blocks, continuation lines joined, comments dropped, each once."""
    out = [("README.md", command) for command in goal_commands()]
    for doc in DOCS:
        for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", doc.read_text(), re.S):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = line.split(" #")[0].strip() if not line.lstrip().startswith("#") else ""
                if line:
                    out.append((str(doc.relative_to(ROOT)), " ".join(line.split())))
    return list(dict.fromkeys(out))


# ----------------------------------------------------------------------- the README's first screen
FIRST_SCREEN = 40  # lines: what the README shows before its reader scrolls


def goal_commands() -> list[str]:
    """The commands of the table of goals on the README's first screen (its `command` column)."""
    first_screen = (ROOT / "README.md").read_text().splitlines()[:FIRST_SCREEN]
    table = [line.strip().strip("|") for line in first_screen if line.startswith("|")]
    rows = [[cell.strip() for cell in line.split("|")] for line in table]
    if not rows or "command" not in rows[0]:
        return []
    column = rows[0].index("command")
    return [command for row in rows[2:] for command in re.findall(r"`([^`]+)`", row[column])]


def _snakemake_args(command: str) -> argparse.Namespace:
    from snakemake.cli import get_argument_parser

    return get_argument_parser().parse_args(shlex.split(command)[1:])


def test_the_first_screen_shows_the_set_up_and_the_paper_s_commands() -> None:
    """The README's first 40 lines hold the two set-up commands (`make run`, the main job on the
    default config; `make test`, what CI runs) and the paper's study on a cluster."""
    commands = goal_commands()
    assert {"make run", "make test"} <= set(commands), commands
    assert "make test" in (ROOT / ".ci" / "run").read_text().splitlines()
    run = re.search(r"^run:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    main_job = _snakemake_args("snakemake" + run.splitlines()[0].split("/snakemake", 1)[1])
    assert not main_job.configfile and main_job.targets == ["all"]  # the default config
    paper = [
        args
        for args in (
            _snakemake_args(c) for c in commands if c.startswith("snakemake ") and "paper" in c
        )
        if [str(f) for f in args.configfile or []] == ["config/paper.yaml"]
        and args.targets == ["all"]
        and not args.dryrun
    ]
    assert paper and paper[0].profile, "the first screen needs the paper's study on its profile"


def prose_sentences(markdown: str) -> list[str]:
    """A Markdown text's sentences: its lines outside code blocks, tables and headings, joined
    per paragraph or list item, split after '. ', '? ' and '! ' (not after 'e.g.' or 'i.e.')."""
    paragraphs: list[list[str]] = []
    fenced, joined = False, False
    for line in markdown.splitlines():
        text = line.strip()
        fenced ^= text.startswith("```")
        if fenced or not text or text.startswith(("```", "|", "#")):
            joined = False
            continue
        if not joined or re.match(r"([*-]|\d+\.) ", text):
            paragraphs.append([])
        paragraphs[-1].append(text)
        joined = True
    split = re.compile(r"(?<=[.?!])(?<!e\.g\.)(?<!i\.e\.) +")
    return [s for p in paragraphs for s in split.split(" ".join(p)) if s.strip()]


def test_prose_sentences_is_the_stated_split() -> None:
    text = "A b. C, e.g. d?\n\n```\nx. y\n```\n| a. b |\n# H. I\n* E\nf! G\n- H"
    assert prose_sentences(text) == ["A b.", "C, e.g. d?", "* E f!", "G", "- H"]


def test_readme_prose_reads_in_short_sentences() -> None:
    """Its prose averages at most 25 words a sentence, none over 50 (inline code counts its
    words)."""
    words = [len(s.split()) for s in prose_sentences((ROOT / "README.md").read_text())]
    assert len(words) > 50
    assert sum(words) / len(words) <= 25, f"{sum(words) / len(words):.1f} words a sentence"
    assert max(words) <= 50, f"a sentence of {max(words)} words"


def example_file(name: str) -> str:
    """The YAML block that follows `name` in its document (e.g. the own-text study)."""
    text = EXAMPLE_FILES[name].read_text()
    return re.search(rf"`{re.escape(name)}`:\s*```yaml\n(.*?)```", text, re.S).group(1)


def _of(program: str) -> list[tuple[str, str]]:
    return [(d, c) for d, c in doc_commands() if c.split()[0] == program]


def _leviathan_commands() -> list[tuple[str, str]]:
    """`leviathan ...` lines, `[python -m leviathan.]torchrun ... -m leviathan.cli ...` lines and
    `$(leviathan ...)`."""
    nested = [(d, m) for d, c in doc_commands() for m in re.findall(r"\$\((leviathan [^)]*)\)", c)]
    launched = [(d, c) for d, c in _of("python") if "leviathan.cli" in c.split()]
    return _of("leviathan") + _of("torchrun") + launched + nested


def _leviathan_argv(command: str) -> list[str]:
    """The leviathan arguments of a command (`leviathan ...` or `torchrun ... -m leviathan.cli
    ...`), optional parts written `[--flag value]` left out."""
    argv = shlex.split(re.sub(r"\[[^\]]*\]", "", command))
    return argv[argv.index("leviathan.cli") + 1 :] if "leviathan.cli" in argv else argv[1:]


def _targets_substituted(command: str) -> str:
    """`$(leviathan target ...)` replaced by what it prints (run here, in this process)."""
    import contextlib
    import io

    from leviathan.cli import main

    def run(match: re.Match[str]) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(shlex.split(match.group(1))[1:]) == 0, match.group(0)
        return out.getvalue().strip()

    return re.sub(r"\$\((leviathan [^)]*)\)", run, command)


def test_every_command_is_checked_or_says_why_not() -> None:
    commands = doc_commands()
    assert len(commands) > 40
    programs = {c.split()[0] for _, c in commands}
    assert programs <= CHECKED | set(UNCHECKED), programs - CHECKED - set(UNCHECKED)
    assert CHECKED <= programs


def test_leviathan_commands_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    from leviathan.cli import build_parser

    monkeypatch.chdir(ROOT)
    commands = _of("leviathan") + _of("torchrun")
    nested = [(d, m) for d, c in doc_commands() for m in re.findall(r"\$\((leviathan [^)]*)\)", c)]
    for doc, command in commands + nested:
        try:
            build_parser().parse_args(_leviathan_argv(command))
        except SystemExit:
            pytest.fail(f"{doc}: `{command}` does not parse")


@pytest.mark.parametrize(
    ("command", "extra"),
    [
        ("params", []),
        ("config", ["--no-memory"]),  # the plan without its FakeTensor traces (seconds)
        ("target", []),
        # as written: the paper's plan traces each of its 18 cells' jobs' GPU memory (~1 min)
        pytest.param("config", [], marks=pytest.mark.slow, id="config-as-written"),
    ],
)
def test_cheap_leviathan_commands_run(
    command: str,
    extra: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Those that need no outputs of a run (the paper's plan included) run here, exit 0."""
    from leviathan.cli import main

    monkeypatch.chdir(ROOT)
    runs = dict.fromkeys(c for _, c in _leviathan_commands() if _leviathan_argv(c)[0] == command)
    assert runs
    for line in runs:
        assert main(_leviathan_argv(line) + extra) == 0, line
    assert capsys.readouterr().out


def _snakemake_rules() -> set[str]:
    files = [ROOT / "Snakefile", *(ROOT / "workflow" / "rules").glob("*.smk")]
    return {m for f in files for m in re.findall(r"^rule (\w+):", f.read_text(), re.M)}


def test_snakemake_commands_parse_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """By Snakemake's own parser: every --configfile value an existing config (a target written
    after --configfile would be read as one more file), every target a rule or a file path."""
    from snakemake.cli import get_argument_parser

    monkeypatch.chdir(ROOT)
    rules = _snakemake_rules()
    for doc, command in _of("snakemake"):
        args = get_argument_parser().parse_args(shlex.split(_targets_substituted(command))[1:])
        for path in args.configfile or []:
            assert Path(path).is_file() or str(path) in EXAMPLE_FILES, f"{doc}: `{command}`: {path}"
        assert args.targets or args.report, f"{doc}: `{command}` names no target"
        for target in args.targets:
            assert target in rules or "/" in target, f"{doc}: `{command}`: target {target}"


def test_make_targets_and_dvc_commands_exist() -> None:
    from dvc.cli import parse_args

    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    for doc, command in _of("make"):
        assert set(command.split()[1:]) <= targets, f"{doc}: `{command}`"
    for doc, command in _of("dvc"):
        try:
            parse_args(shlex.split(command)[1:])
        except SystemExit:
            pytest.fail(f"{doc}: `{command}` is not a dvc command")


def test_data_and_result_paths_are_the_layout_s() -> None:
    """A path under data/ or results/ that a command names is one the pipeline writes."""
    roots = (layout.TOKENS_ROOT, layout.CORPUS_ROOT, layout.RUNS_ROOT, layout.REPORT_DIR)
    roots += ("results/export", "results/lm_eval", layout.EVAL_ROOT)
    for doc, command in doc_commands():
        for path in re.findall(r"(?:^|[\s=])((?:data|results)/\S+)", command):
            assert path.startswith(roots), f"{doc}: `{command}` names {path}, not a layout path"
    shards = layout.shards(layout.tokens_dir("embedded", "gpt2"))
    assert any(shards["train"] in c for _, c in _of("leviathan"))  # the training example's


@pytest.mark.slow
def test_snakemake_commands_dry_run(tmp_path: Path) -> None:
    """Each Snakemake command, in the documents' order, dry-runs (`-n`) in a copy of the
    workflow, once however many documents give it. Skipped: a user profile (`--profile slurm`,
    installed by the doc's own steps) and `--report` (needs a finished run)."""
    import subprocess
    import sys

    for name in ("Snakefile", "workflow", "profiles", "config"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    for name in EXAMPLE_FILES:
        (tmp_path / name).write_text(example_file(name))
    (tmp_path / "my_texts").mkdir()
    (tmp_path / "my_texts" / "a.txt").write_text("Some text of my own.\n")
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    env = {**os.environ, "PATH": path, ALLOW_FOREIGN_ENV: "1"}  # the copy runs this checkout's
    ran, seen = 0, set()
    for doc, command in _of("snakemake"):
        if "--profile slurm" in command or "--report" in command or command in seen:
            continue  # a command several documents give dry-runs once
        seen.add(command)
        line = re.sub(r"<(\w+)>", r"\1", command)  # <account> placeholders: any value dry-runs
        run = subprocess.run(
            ["bash", "-c", f"{line} -n"], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert run.returncode == 0, f"{doc}: `{command}`:\n{run.stderr[-3000:]}"
        ran += 1
    assert ran >= 6


def test_no_file_cites_a_document_outside_the_repository() -> None:
    """Docstrings and comments cite docs/method.md (the method as implemented), not the
    specification and design notes the repository does not hold."""
    cites = re.compile(r"\b(SPEC|DESIGN)\b(?!_)")
    files = [
        p
        for folder in ("src", "bench", "workflow", "tests", "config")
        for p in (ROOT / folder).rglob("*")
        if p.suffix in (".py", ".yaml", ".smk", ".md") and p != Path(__file__)
    ]
    assert len(files) > 50
    hits = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in files
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if cites.search(line)
    ]
    assert not hits, f"cite docs/method.md instead: {hits}"
