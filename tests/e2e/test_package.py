"""End-to-end: the Debian package (scripts/make-deb.sh, what `make deb`
runs) builds from the binary under test, lintian finds no error in it, its
units run /usr/bin/retagfs, and its unpacked tree runs `retagfs --version`
and a scan of a small library. These run once."""

import os
import subprocess

import pytest

from conftest import BIN, ROOT

pytestmark = pytest.mark.once


@pytest.fixture(scope="module")
def package():
    p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "make-deb.sh")], capture_output=True, text=True,
                       env={**os.environ, "BIN": BIN})
    assert p.returncode == 0, p.stderr
    deb = p.stdout.strip().splitlines()[-1]
    assert os.path.basename(deb).startswith("retagfs_") and deb.endswith(".deb"), deb
    return deb


def test_lintian_finds_no_error(package):
    p = subprocess.run(["lintian", "--fail-on", "error", package], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert not [line for line in p.stdout.splitlines() if line.startswith("E:")], p.stdout


def test_the_package_holds_the_binary_pages_completions_and_units(package):
    names = subprocess.run(["dpkg-deb", "-c", package], capture_output=True, text=True, check=True).stdout
    for path in ["./usr/bin/retagfs", "./usr/share/man/man1/retagfs-mount.1.gz",
                 "./usr/share/bash-completion/completions/retagfs", "./usr/lib/systemd/system/retagfs.service",
                 "./usr/lib/systemd/system/retagfs-serve.service", "./usr/lib/systemd/system/retagfs-scan.timer"]:
        assert path in names, path
    fields = subprocess.run(["dpkg-deb", "-f", package], capture_output=True, text=True, check=True).stdout
    assert "Package: retagfs" in fields and "fuse3" in fields, fields
    info = subprocess.run(["dpkg-deb", "-I", package], capture_output=True, text=True, check=True).stdout
    assert "postinst" in info and "try-restart" in subprocess.run(
        ["dpkg-deb", "--ctrl-tarfile", package], capture_output=True, check=True).stdout.decode("latin-1")


def test_the_unpacked_tree_runs_and_its_units_name_it(package, tmp_path, library):
    tree = tmp_path / "unpacked"
    subprocess.run(["dpkg-deb", "-x", package, str(tree)], check=True)
    binary = tree / "usr" / "bin" / "retagfs"
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True).stdout
    assert version.startswith("retagfs "), version
    db = tmp_path / "packaged.db"
    p = subprocess.run([str(binary), "scan", str(library), "--db", str(db), "--json"], capture_output=True,
                       text=True)
    assert p.returncode == 0 and db.exists(), p.stderr
    for unit in (tree / "usr" / "lib" / "systemd" / "system").iterdir():
        text = unit.read_text()
        assert "/usr/local/bin" not in text, unit.name
        if unit.suffix == ".service":
            assert "/usr/bin/retagfs" in text, unit.name
