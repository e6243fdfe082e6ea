"""The README a newcomer reads: short, and every path, script and ``resurrect`` command it
names exists (docs/README.md indexes every page of docs/)."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from resurrect.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
MAX_LINES = 250
TOP = {p.name for p in REPO.iterdir() if not p.name.startswith(".")} | {".ci"}
CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PLACEHOLDER = re.compile(r"[<>*{}]|\.\.\.")


def code_spans(text: str) -> list[str]:
    return [span.replace("\\|", "|") for span in CODE.findall(text)]


def named_paths(text: str) -> set[str]:
    """Repository paths in code spans (a command's first word too) and in links."""
    found = set()
    for span in code_spans(text):
        for word in span.split():
            word = word.strip("()[],;:")
            if "/" in word and word.split("/")[0] in TOP and not PLACEHOLDER.search(word):
                found.add(word)
    for target in LINK.findall(text):
        if "://" not in target and not target.startswith("#"):
            found.add(target.split("#")[0])
    return found


def test_the_readme_is_short() -> None:
    assert len(README.splitlines()) <= MAX_LINES


def test_every_path_the_readme_names_exists() -> None:
    paths = named_paths(README)
    assert {"deploy/demo.sh", "deploy/run-tests.sh", "docs/architecture.md"} <= paths
    assert sorted(p for p in paths if not (REPO / p).exists()) == []


def test_every_deploy_command_the_readme_names_is_an_executable_script() -> None:
    scripts = {p for p in named_paths(README) if p.startswith(("deploy/", ".ci/"))}
    scripts = {p for p in scripts if p.endswith((".sh", "/run"))}
    assert scripts and all(os.access(REPO / p, os.X_OK) for p in scripts), scripts


def test_the_readme_links_its_own_headings_that_exist() -> None:
    slugs = {
        re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", README, re.M)
    }
    anchors = {t[1:] for t in LINK.findall(README) if t.startswith("#")}
    assert anchors <= slugs


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _check_command(words: list[str], parser: argparse.ArgumentParser, span: str) -> None:
    """Subcommand words name subcommands (``a|b`` and ``[a|b]``: each); options are the
    parser's own; anything else (FILE, ID, a value) ends the check of words."""
    for index, word in enumerate(words):
        bare = word.strip("[]")
        if bare in ("-", "|"):  # standard input, a choice of forms
            continue
        if bare.startswith("-"):
            for option in bare.split("|"):
                option = option.split("=")[0]
                if option.startswith("-"):
                    assert option in parser._option_string_actions, (span, option)
            continue
        subs = _subparsers(parser)
        names = [name for name in bare.split("|") if name]
        if subs and any(name in subs for name in names):
            assert all(name in subs for name in names), f"{span}: not all of {bare} exist"
            for name in names:
                _check_command(words[index + 1 :], subs[name], span)
            return
        assert not (subs and word == bare and bare.islower() and bare.isalpha()), (
            f"{span}: no subcommand {bare!r}"
        )
        if subs and word == bare:
            return


def test_every_resurrect_command_the_readme_names_exists() -> None:
    commands = [s for s in code_spans(README) if s.startswith("resurrect ")]
    assert len(commands) > 20
    for span in commands:
        _check_command(span.split()[1:], build_parser(), span)


def test_docs_readme_indexes_every_page() -> None:
    index = (REPO / "docs" / "README.md").read_text()
    pages = {p.name for p in (REPO / "docs").glob("*.md")} - {"README.md"}
    assert pages == set(LINK.findall(index)) & pages
    assert {t for t in LINK.findall(index) if not (REPO / "docs" / t).exists()} == set()
