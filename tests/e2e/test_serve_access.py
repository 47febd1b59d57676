"""End-to-end: who may read what `retagfs serve` serves. HTTP Basic against
an htpasswd file of bcrypt hashes (no credentials, wrong ones, right ones,
an auth file changed or gone under a running server), HTTPS with a test
certificate read again on SIGHUP (curl and rclone), and the warnings a
listener beyond loopback gets. None of it depends on FUSE: these run once."""

import base64
import hashlib
import http.client
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time

import pytest

from conftest import BIN
from test_http import Server, quoted
from test_live import export, wait_for

pytestmark = pytest.mark.once


def htpasswd(path, user, password, create=False):
    subprocess.run(["htpasswd", "-bB" + ("c" if create else ""), str(path), user, password],
                   check=True, capture_output=True)


def certificate(directory, name):
    """A self-signed certificate for 127.0.0.1: (cert path, key path)."""
    cert, key = directory / (name + ".pem"), directory / (name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "2", "-subj", "/CN=" + name,
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


def request(s, method, path, user=None, password=None, headers=None, context=None):
    headers = dict(headers or {})
    if user is not None:
        token = base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
        headers["Authorization"] = "Basic " + token
    if context is None:
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", s.port, timeout=30, context=context)
    conn.request(method, path, headers=headers)
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, body


@pytest.fixture
def users(tmp_path):
    path = tmp_path / "users"
    htpasswd(path, "ann", "first secret", create=True)
    htpasswd(path, "bob", "bobs secret")
    with open(path, "a") as f:
        f.write("# a comment, then a hash htpasswd -B did not make\ncarl:$apr1$abc$def\n")
    return path


def test_basic_auth_protects_every_request_and_follows_the_file(tmp_path, store, users):
    s = Server(store, tmp_path / "serve.log", "--auth-file", str(users))
    try:
        path = quoted(next(iter(export(store).values()))["path"])
        folder = path.rsplit("/", 1)[0] + "/"
        asks = [("GET", path, {}), ("HEAD", path, {}), ("GET", folder, {}), ("GET", folder + "?m3u", {}),
                ("GET", folder, {"Accept": "application/json"}), ("PROPFIND", folder, {"Depth": "1"}),
                ("OPTIONS", "/", {})]
        for method, path, headers in asks:
            status, h, body = request(s, method, path, headers=headers)
            assert status == 401, (method, path)
            assert h["www-authenticate"].startswith('Basic realm="retagfs"')
            assert b"EXTM3U" not in body and b"multistatus" not in body
            assert request(s, method, path, "ann", "wrong", headers)[0] == 401
            assert request(s, method, path, "nobody", "first secret", headers)[0] == 401
            assert request(s, method, path, "carl", "x", headers)[0] == 401
            ok = request(s, method, path, "ann", "first secret", headers)[0]
            assert ok in (200, 207), (method, path, ok)
        assert request(s, "GET", path, "bob", "bobs secret")[0] == 200
        assert request(s, "GET", path, headers={"Authorization": "Bearer abc"})[0] == 401
        assert request(s, "GET", path, headers={"Authorization": "Basic !!notbase64"})[0] == 401
        # The file changed under the running server: ann's new password
        # works, her old one (remembered as verified) no longer does.
        htpasswd(users, "ann", "second secret")
        wait_for(lambda: request(s, "GET", path, "ann", "second secret")[0] == 200, timeout=5)
        assert request(s, "GET", path, "ann", "first secret")[0] == 401
        assert request(s, "GET", path, "bob", "bobs secret")[0] == 200
        # The file gone: no one is let in, and the log says why.
        os.rename(users, str(users) + ".away")
        wait_for(lambda: request(s, "GET", path, "bob", "bobs secret")[0] == 401, timeout=5)
        os.rename(str(users) + ".away", users)
        wait_for(lambda: request(s, "GET", path, "bob", "bobs secret")[0] == 200, timeout=5)
        # SIGHUP (`systemctl reload`) reads the file again and never stops
        # a server without TLS.
        s.proc.send_signal(signal.SIGHUP)
        time.sleep(0.3)
        assert s.proc.poll() is None
        assert request(s, "GET", path, "bob", "bobs secret")[0] == 200
    finally:
        log = s.stop()
    assert "users:4: not `user:bcrypt-hash`" in log
    assert "wrong password for \"ann\"" in log and "no user \"nobody\"" in log
    assert "cannot be read" in log
    assert "first secret" not in log and "bobs secret" not in log


def test_an_auth_file_that_lets_no_one_in_is_refused_at_start(tmp_path, store):
    for text in [None, "", "carl:$apr1$abc$def\n"]:
        path = tmp_path / "users"
        if text is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(text)
        r = subprocess.run([BIN, "serve", "--db", str(store), "--listen", "127.0.0.1:0", "--auth-file", str(path)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode != 0 and "--auth-file" in r.stderr, (text, r.stderr)
    r = subprocess.run([BIN, "serve", "--db", str(store), "--tls-cert", str(tmp_path / "none.pem")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--tls-key" in r.stderr


def fingerprint(port):
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with context.wrap_socket(socket.create_connection(("127.0.0.1", port))) as c:
        return hashlib.sha256(c.getpeercert(binary_form=True)).hexdigest()


def test_https_with_curl_and_rclone_and_a_certificate_renewed_on_sighup(tmp_path, store, users):
    cert, key = certificate(tmp_path, "first")
    served_cert, served_key = tmp_path / "served.pem", tmp_path / "served.key"
    shutil.copy(cert, served_cert)
    shutil.copy(key, served_key)
    s = Server(store, tmp_path / "serve.log", "--auth-file", str(users),
               "--tls-cert", str(served_cert), "--tls-key", str(served_key))
    try:
        assert s.scheme == "https"
        track = next(iter(export(store).values()))
        path = quoted(track["path"])
        out = subprocess.run(["curl", "-sS", "--cacert", str(cert), "-u", "ann:first secret", s.url(path)],
                             capture_output=True, check=True).stdout
        plain_server = Server(store, tmp_path / "plain.log")
        try:
            assert out == request(plain_server, "GET", path)[2]
        finally:
            plain_server.stop()
        # Without the certificate trusted, curl refuses; without credentials, 401.
        assert subprocess.run(["curl", "-s", s.url(path)], capture_output=True).returncode != 0
        code = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", str(cert),
                               s.url(path)], capture_output=True, text=True).stdout
        assert code == "401"
        # rclone over HTTPS, with the password as rclone keeps it.
        env = dict(os.environ)
        env.pop("AWS_CA_BUNDLE", None)
        obscured = subprocess.run(["rclone", "obscure", "first secret"], capture_output=True, text=True,
                                  check=True, env=env).stdout.strip()
        remote = ":webdav,url='%s',user=ann,pass='%s':" % (s.url("/"), obscured)
        listed = subprocess.run(["rclone", "lsf", "-R", "--files-only", "--config", "/dev/null",
                                 "--ca-cert", str(cert), remote], capture_output=True, text=True, env=env, timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert track["path"] in listed.stdout.splitlines()
        # SIGHUP reads the files again: a renewed certificate for new
        # connections; one that cannot be read leaves the old in use.
        before = fingerprint(s.port)
        second, second_key = certificate(tmp_path, "second")
        shutil.copy(second, served_cert)
        shutil.copy(second_key, served_key)
        s.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: fingerprint(s.port) != before, timeout=5)
        renewed = fingerprint(s.port)
        served_key.write_text("not a key\n")
        s.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert s.proc.poll() is None and fingerprint(s.port) == renewed
        code = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", str(second),
                               "-u", "ann:first secret", s.url(path)], capture_output=True, text=True).stdout
        assert code == "200"
    finally:
        log = s.stop()
    assert "the certificate in use stays" in log


def test_a_listener_beyond_loopback_is_warned_about(tmp_path, store, users):
    cert, key = certificate(tmp_path, "c")
    cases = [([], "without --auth-file"), (["--auth-file", str(users)], "passwords over plain HTTP"),
             (["--auth-file", str(users), "--tls-cert", str(cert), "--tls-key", str(key)], None)]
    for extra, warning in cases:
        log_path = tmp_path / "wide.log"
        with open(log_path, "w") as log:
            p = subprocess.Popen([BIN, "serve", "--db", str(store), "--listen", "0.0.0.0:0", *extra],
                                 stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: "serving the view" in log_path.read_text(), timeout=20)
        finally:
            p.terminate()
            p.wait(timeout=20)
        text = log_path.read_text()
        if warning:
            assert warning in text, text
        else:
            assert "listening on" not in text, text
