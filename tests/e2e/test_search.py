"""End-to-end: `MNT/.search/QUERY/` holds the files `retagfs query` finds,
at the paths the view gives them; `.search` is never listed; a search
follows a retag; many searches stay bounded; `--no-search` turns it off.
Lookups and listings answer the same way through /dev/fuse and io_uring:
these run once."""

import errno
import os
import time

import pytest

from conftest import run
from test_query import tagged  # noqa: F401 (a fixture)

pytestmark = pytest.mark.once


def query_paths(db, text):
    p = run("query", "--db", str(db), "--", text, check=False)
    assert p.returncode in (0, 1), p.stderr
    return sorted(p.stdout.splitlines())


def search_paths(mnt, text):
    """Every file under the search folder, relative to it."""
    folder = os.path.join(mnt, ".search", text.replace("%", "%25").replace("/", "%2F"))
    found = []
    for dirpath, _, names in os.walk(folder):
        found += [os.path.relpath(os.path.join(dirpath, n), folder) for n in names]
    return sorted(found)


def eventually(check, seconds=10):
    deadline = time.time() + seconds
    while True:
        try:
            return check()
        except AssertionError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.parametrize("text", ["genre:jazz", "genre:=Jazz , title:blue", "year:1955..1965",
                                  "-genre:jazz", "format:flac", "nothing-has-this"])
def test_a_search_folder_holds_what_query_finds(tagged, mount, text):  # noqa: F811
    m = mount(tagged)
    assert search_paths(m.mnt, text) == query_paths(tagged, text)
    # The files are the view's files: same inode, same bytes.
    for rel in search_paths(m.mnt, text):
        a, b = os.path.join(m.mnt, ".search", text, rel), os.path.join(m.mnt, rel)
        assert os.stat(a).st_ino == os.stat(b).st_ino
        with open(a, "rb") as fa, open(b, "rb") as fb:
            assert fa.read() == fb.read()


def test_search_is_never_listed_and_a_bad_query_is_einval(tagged, mount):  # noqa: F811
    m = mount(tagged)
    assert ".search" not in os.listdir(m.mnt)
    os.listdir(os.path.join(m.mnt, ".search", "genre:jazz"))
    assert ".search" not in os.listdir(m.mnt)
    assert os.listdir(os.path.join(m.mnt, ".search")) == []
    with pytest.raises(OSError) as e:
        os.listdir(os.path.join(m.mnt, ".search", "genre::("))
    assert e.value.errno == errno.EINVAL
    m.log.seek(0)
    assert "invalid query" in m.log.read()


def test_a_slash_in_a_query_is_written_percent_2f(tagged, mount):  # noqa: F811
    m = mount(tagged)
    text = "path::/tagged\\.flac$"
    assert query_paths(tagged, text) != []
    assert search_paths(m.mnt, text) == query_paths(tagged, text)


def test_a_search_follows_a_retag(tagged, mount):  # noqa: F811
    m = mount(tagged)
    before = search_paths(m.mnt, "genre:soul")
    assert len(before) == 1
    run("tag", "--db", str(tagged), "add", "--query", "title:blue", "genre=Soul")
    eventually(lambda: _assert_equal(search_paths(m.mnt, "genre:soul"), query_paths(tagged, "genre:soul")))
    assert len(query_paths(tagged, "genre:soul")) == 2
    run("tag", "--db", str(tagged), "rm", "--query", "genre:soul", "genre")
    eventually(lambda: _assert_equal(search_paths(m.mnt, "genre:soul"), []))


def _assert_equal(a, b):
    assert a == b


def rss_kib(pid):
    status = open(f"/proc/{pid}/status").read()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))


def test_many_searches_stay_bounded(tagged, mount):  # noqa: F811
    m = mount(tagged)
    for n in range(100):
        os.listdir(os.path.join(m.mnt, ".search", f"-title:nothing{n}"))
    first = rss_kib(m.proc.pid)
    for n in range(100, 2000):
        os.listdir(os.path.join(m.mnt, ".search", f"-title:nothing{n}"))
    # 1,900 searches more (a few kilobytes each here) and the daemon grew
    # by less than they would take if all were kept.
    assert rss_kib(m.proc.pid) - first < 2048
    # The first searches were dropped, and are made again when looked up
    # once the kernel forgets the folder it knew (SEARCH_TTL, a second).
    time.sleep(1.5)
    assert search_paths(m.mnt, "-title:nothing0") == query_paths(tagged, "-title:nothing0")


def test_no_search_turns_it_off(tagged, mount):  # noqa: F811
    m = mount(tagged, "--no-search")
    with pytest.raises(FileNotFoundError):
        os.listdir(os.path.join(m.mnt, ".search", "genre:jazz"))
