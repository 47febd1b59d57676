"""End-to-end: the configuration file and the environment. The file's keys
are long options that become defaults, at the top for every command or in
a command's table; it is found by --config, RETAGFS_CONFIG or under
XDG_CONFIG_HOME; an error in it names the line. Every option's variable
(RETAGFS_<OPTION>) beats the file, and a flag beats both; `retagfs config`
says what each command runs with and whence. Nothing here mounts: these
run once."""

import json
import os

import pytest

from conftest import run

pytestmark = pytest.mark.once


def paths(*args, **kw):
    return sorted(run("query", "--print", "view", *args, **kw).stdout.splitlines())


def test_a_key_at_the_top_is_every_commands_default_and_a_flag_wins(tmp_path, store):
    config = tmp_path / "retagfs.toml"
    config.write_text(f'db = "{store}"\ntemplate = "$format/$title"\n'
                      '[export]\ntemplate = "$format"\n')
    by_file = paths("--config", str(config))
    assert by_file and all(p.count("/") == 1 for p in by_file), by_file
    assert any(p.startswith("flac/") for p in by_file), by_file
    by_flag = paths("--config", str(config), "--template", "$title")
    assert by_flag and all("/" not in p for p in by_flag), by_flag
    exported = run("export", "--config", str(config)).stdout
    assert '"path": "flac' in exported and '"path": "flac/' not in exported, exported[:400]


def test_the_file_is_found_by_variable_and_in_the_users_folder(tmp_path, store):
    config = tmp_path / "named.toml"
    config.write_text('template = "$format/$title"\n')
    env = {**os.environ, "RETAGFS_CONFIG": str(config)}
    assert all(p.count("/") == 1 for p in paths("--db", str(store), env=env))
    home = tmp_path / "xdg"
    (home / "retagfs").mkdir(parents=True)
    (home / "retagfs" / "config.toml").write_text('template = "$title"\n')
    env = {**os.environ, "XDG_CONFIG_HOME": str(home)}
    assert all("/" not in p for p in paths("--db", str(store), env=env))


@pytest.mark.parametrize("text,says", [
    ('\n\ntemplat = "x"\n', "line 3: `templat` is not an option of any command"),
    ('[mount]\nread-ahead = "sometimes"\n', "line 2: `read-ahead`: invalid value 'sometimes'"),
    ('[query]\nread-ahead = "off"\n', "line 2: `read-ahead` is not an option of `retagfs query`"),
    ('template = ["$a", "$b"]\n', "line 1: `template` takes one value, not a list"),
    ('template = "open\n', "TOML parse error at line 1"),
])
def test_an_error_in_the_file_names_its_line_and_is_a_usage_error(tmp_path, store, text, says):
    config = tmp_path / "bad.toml"
    config.write_text(text)
    p = run("query", "--db", str(store), "--config", str(config), "x", check=False)
    assert p.returncode == 2, p.stderr
    assert str(config) in p.stderr and says in p.stderr, p.stderr


def test_a_named_file_that_is_missing_is_an_error(tmp_path, store):
    p = run("query", "--db", str(store), "--config", str(tmp_path / "none.toml"), "x", check=False)
    assert p.returncode == 2 and "cannot read the configuration file" in p.stderr, p.stderr


def test_a_flag_beats_its_variable_which_beats_the_file(tmp_path, store):
    config = tmp_path / "retagfs.toml"
    config.write_text('template = "$format/$title"\n')
    env = {**os.environ, "RETAGFS_CONFIG": str(config), "RETAGFS_DB": str(store)}
    assert all(p.count("/") == 1 for p in paths(env=env)), "the file"
    env["RETAGFS_TEMPLATE"] = "$title"
    assert all("/" not in p for p in paths(env=env)), "the variable over the file"
    by_flag = paths("--template", "$format/x/$title", env=env)
    assert by_flag and all(p.count("/") == 2 for p in by_flag), "the flag over the variable"
    p = run("query", "x", env={**env, "RETAGFS_PRINT": "sometimes"}, check=False)
    assert p.returncode == 2 and "RETAGFS_PRINT" not in p.stdout, p.stderr


def test_config_says_what_each_command_runs_with_and_whence(tmp_path, store):
    config = tmp_path / "retagfs.toml"
    config.write_text('template = "$title"\n[mount]\nread-ahead = "off"\n')
    env = {**os.environ, "RETAGFS_DB": str(store)}
    report = json.loads(run("config", "--config", str(config), "--json", env=env).stdout)
    assert report["file"] == str(config)
    got = {(s["command"], s["option"]): (s["values"], s["source"], s["variable"]) for s in report["settings"]}
    assert got[("query", "db")] == ([str(store)], "environment", "RETAGFS_DB")
    assert got[("export", "template")] == (["$title"], "file", "RETAGFS_TEMPLATE")
    assert got[("mount", "read-ahead")] == (["off"], "file", "RETAGFS_READ_AHEAD")
    assert ("scan", "read-ahead") not in got, "scan has no such option"
    assert got[("mount", "mode")] == (["synthesis"], "default", "RETAGFS_MODE")
    assert ("query", "template") in got and ("scan", "template") not in got
    text = run("config", "--config", str(config), env=env).stdout
    assert "mount --read-ahead off  (file)" in text, text


# (command, option, a value in the file, another in the variable)
PER_COMMAND = [
    ("scan", "jobs", "3", "5"),
    ("mount", "read-ahead", "off", "on"),
    ("mount", "owner", "root", "nobody"),
    ("serve", "listen", "127.0.0.1:9001", "127.0.0.1:9002"),
    ("serve", "max-connections", "10", "20"),
    ("export", "default-fallback", "A", "B"),
    ("query", "print", "library", "id"),
    ("undo", "list", "true", "false"),
    ("import", "dry-run", "true", "false"),
    ("tag", "recursive", "true", "false"),
]


@pytest.mark.parametrize("command,option,in_file,in_variable", PER_COMMAND,
                         ids=["%s --%s" % c[:2] for c in PER_COMMAND])
def test_each_commands_options_come_from_the_variable_over_the_file(tmp_path, command, option, in_file,
                                                                   in_variable):
    config = tmp_path / "retagfs.toml"
    value = in_file if in_file in ("true", "false") else '"%s"' % in_file
    config.write_text("[%s]\n%s = %s\n" % (command, option, value))
    variable = "RETAGFS_" + option.upper().replace("-", "_")

    def setting(env):
        report = json.loads(run("config", "--config", str(config), "--json", env=env).stdout)
        found = [(s["values"], s["source"]) for s in report["settings"]
                 if s["command"] == command and s["option"] == option]
        assert len(found) == 1, found
        return found[0]

    env = {k: v for k, v in os.environ.items() if k != variable}
    assert setting(env) == ([in_file], "file")
    assert setting({**env, variable: in_variable}) == ([in_variable], "environment")
