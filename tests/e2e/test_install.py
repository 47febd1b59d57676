"""End-to-end: `make install DESTDIR=... PREFIX=/usr` lays out the binary,
the completions of bash, zsh and fish and a manual page per command, made
by the binary from its command line; bash loads the completion and every
page renders. These run once."""

import os
import re
import subprocess

import pytest

from conftest import BIN, ROOT

pytestmark = pytest.mark.once

COMMANDS = ["scan", "mount", "serve", "export", "query", "undo", "tag", "art", "import", "config",
            "completions"]


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    stage = tmp_path_factory.mktemp("stage")
    subprocess.run(["make", "-s", "-C", ROOT, "install", f"BIN={BIN}", f"DESTDIR={stage}", "PREFIX=/usr"],
                   check=True, capture_output=True, text=True)
    return stage / "usr"


def test_install_lays_out_the_binary_completions_and_pages(staged):
    assert os.access(staged / "bin" / "retagfs", os.X_OK)
    for f in ["share/bash-completion/completions/retagfs", "share/zsh/vendor-completions/_retagfs",
              "share/fish/vendor_completions.d/retagfs.fish"]:
        assert (staged / f).stat().st_size > 0, f
    pages = {p.name for p in (staged / "share/man/man1").iterdir()}
    assert {"retagfs.1"} | {f"retagfs-{c}.1" for c in COMMANDS} <= pages, pages
    assert "retagfs-man-pages.1" not in pages, "the packaging command is hidden"


def test_bash_loads_the_completion(staged):
    script = staged / "share/bash-completion/completions/retagfs"
    p = subprocess.run(["bash", "-c", f"source {script} && complete -p retagfs"],
                       capture_output=True, text=True)
    assert p.returncode == 0 and "retagfs" in p.stdout, p.stderr
    # What it offers after `retagfs mo`.
    p = subprocess.run(["bash", "-c", f"source {script}; COMP_WORDS=(retagfs mo); COMP_CWORD=1; "
                                      "_retagfs retagfs mo retagfs; echo ${COMPREPLY[@]}"],
                       capture_output=True, text=True)
    assert "mount" in p.stdout.split(), p.stdout + p.stderr


def rendered(page):
    """The page as `man -l` shows it, without its bold and underlining."""
    p = subprocess.run(["man", "-l", str(page)], capture_output=True, text=True,
                       env={**os.environ, "MANWIDTH": "80"})
    assert p.returncode == 0 and p.stderr.strip() == "", (page.name, p.stderr)
    return re.sub(".\x08", "", p.stdout)


def test_every_page_renders(staged):
    for page in sorted((staged / "share/man/man1").iterdir()):
        text = rendered(page)
        assert "NAME" in text and "OPTIONS" in text and page.stem in text, page.name
    mount = rendered(staged / "share/man/man1/retagfs-mount.1")
    assert "RETAGFS_DB" in mount and "--template" in mount, mount[:500]
