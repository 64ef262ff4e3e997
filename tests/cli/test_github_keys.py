"""SSH keys from a GitHub account (issue 12.7): `devctl config set github-user U` and
`devctl admin onboard --github-user U` against a local HTTP server standing in for github.com
(DEVCTL_GITHUB_KEYS_URL), and their one-line errors."""
from __future__ import annotations

import http.server
import json
import threading

import pytest
import yaml

from devctl_helpers import invoke, unique
from devuser_helpers import ED25519

KEYS = {"octo": [ED25519.format("octo@laptop"), "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQC7 octo@old"],
        "nokeys": []}


class GitHub(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the http.server API
        user = self.path.strip("/").removesuffix(".keys")
        if user not in KEYS:
            self.send_response(404)
            self.end_headers()
            self.wfile.write(b"Not Found")
            return
        body = "".join(k + "\n" for k in KEYS[user]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def github(monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), GitHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("DEVCTL_GITHUB_KEYS_URL", "http://127.0.0.1:%d/{user}.keys" % server.server_address[1])
    yield server
    server.shutdown()


def test_config_set_github_user_stores_the_keys_for_create(github, tmp_path):
    result = invoke(["config", "set", "github-user", "octo"])
    assert result.exit_code == 0, result.stderr
    assert "2 SSH key(s) from GitHub" in result.stdout
    config = yaml.safe_load((tmp_path / "devctl.yaml").read_text())
    assert config["github-user"] == "octo" and config["ssh-public-keys"] == KEYS["octo"]
    # devctl create (no --ssh-key-file, no ~/.ssh keys) takes them.
    result = invoke(["create", "box", "--flavor", "cpu-small", "--owner", "o@example.com", "--dry-run", "-o", "json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["spec"]["sshPublicKeys"] == KEYS["octo"]


def test_config_set_github_user_as_seed_002_spells_it(github, tmp_path):
    """seed 002's gpu-dev writes github_user: the same key (issue 28.6)."""
    result = invoke(["config", "set", "github_user", "octo"])
    assert result.exit_code == 0, result.output
    config = yaml.safe_load((tmp_path / "devctl.yaml").read_text())
    assert config["github-user"] == "octo" and config["ssh-public-keys"] == KEYS["octo"]


@pytest.mark.parametrize("user, fragment", [
    ("nokeys", "GitHub user 'nokeys' has no public SSH keys"),
    ("ghost", "GitHub user 'ghost' not found"),
    ("bad_name!", "'bad_name!' is not a GitHub user name"),
])
def test_config_set_github_user_errors_in_one_line(github, tmp_path, user, fragment):
    result = invoke(["config", "set", "github-user", user])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    assert not (tmp_path / "devctl.yaml").exists()  # nothing stored


def test_unreachable_keys_server_is_one_line(monkeypatch):
    monkeypatch.setenv("DEVCTL_GITHUB_KEYS_URL", "http://127.0.0.1:9/{user}.keys")  # discard port: refused
    result = invoke(["config", "set", "github-user", "octo"])
    assert result.exit_code == 1
    assert result.stderr.strip().startswith("error: cannot reach http://127.0.0.1:9/octo.keys")
    assert len(result.stderr.strip().splitlines()) == 1


def test_admin_onboard_github_user_puts_the_keys_on_the_devuser(github, sim, users):
    name = unique("gh")
    result = invoke(["--kubeconfig", sim.kubeconfig, "admin", "onboard", name, "--email", "gh@example.com",
                     "--github-user", "octo", "--dry-run=server", "-o", "json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["spec"]["sshPublicKeys"] == KEYS["octo"]
    result = invoke(["--kubeconfig", sim.kubeconfig, "admin", "onboard", name, "--email", "gh@example.com",
                     "--github-user", "nokeys"])
    assert result.exit_code == 1 and "has no public SSH keys" in result.stderr
    assert not users.exists(name)


# -- issue 25.6: the keys that open a dev server come over TLS, bounded ----------------------------------
class Hostile(http.server.BaseHTTPRequestHandler):
    """Answers as a hostile or broken keys server would: a redirect to plain http elsewhere,
    an answer of 4 MiB of valid keys, an answer dripped a line at a time for ever."""

    def do_GET(self):  # noqa: N802 - the http.server API
        if self.path.startswith("/redirect/"):
            self.send_response(302)
            self.send_header("Location", "http://keys.example.invalid/octo.keys")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        line = (KEYS["octo"][0] + "\n").encode()
        try:
            if self.path.startswith("/huge/"):
                for _ in range((4 << 20) // len(line)):
                    self.wfile.write(line)
            elif self.path.startswith("/slow/"):
                while not self.server.stopping.is_set():
                    self.wfile.write(line)
                    self.wfile.flush()
                    self.server.stopping.wait(0.2)
        except OSError:  # the client gave up: what the test expects
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def hostile():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    server.stopping = threading.Event()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield "http://127.0.0.1:%d" % server.server_address[1]
    server.stopping.set()
    server.shutdown()


@pytest.mark.parametrize("url, fragment", [
    ("http://keys.example.invalid/{user}.keys", "over https:// only (http:// only from localhost)"),
    ("http://10.0.0.1/{user}.keys", "over https:// only"),
    ("ftp://example.com/{user}.keys", "over https:// only"),
    ("file:///etc/{user}.keys", "over https:// only"),
    ("{base}/redirect/{user}.keys", "redirects to http://keys.example.invalid/octo.keys: refused"),
    ("{base}/huge/{user}.keys", "more than the 262144 bytes an SSH key list may be"),
])
def test_keys_only_over_https_and_bounded(hostile, monkeypatch, tmp_path, url, fragment):
    monkeypatch.setenv("DEVCTL_GITHUB_KEYS_URL", url.replace("{base}", hostile))
    result = invoke(["config", "set", "github-user", "octo"])
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    assert not (tmp_path / "devctl.yaml").exists()  # nothing stored


def test_a_slow_keys_server_is_cut_at_the_timeout(hostile, monkeypatch):
    from devctl.errors import DevctlError
    from devctl.github import fetch_keys

    monkeypatch.setenv("DEVCTL_GITHUB_KEYS_URL", hostile + "/slow/{user}.keys")
    with pytest.raises(DevctlError, match=r"took more than 1s to answer"):
        fetch_keys("octo", timeout=1.0)


@pytest.mark.parametrize("url", ["https://github.com/{user}.keys", "https://ghe.example.com/api/{user}.keys",
                                 "http://localhost:8080/{user}.keys", "http://127.0.0.1/{user}", "http://[::1]/{user}"])
def test_https_and_this_machine_are_accepted(url):
    from devctl.github import keys_url, url_problem

    assert url_problem(keys_url("octo", {"github-keys-url": url})) is None


def test_config_refuses_a_plain_http_keys_url(tmp_path):
    result = invoke(["config", "set", "github-keys-url", "http://keys.example.com/{user}.keys"])
    assert result.exit_code == 1 and "over https:// only" in result.stderr
    assert not (tmp_path / "devctl.yaml").exists()
    assert invoke(["config", "set", "github-keys-url", "https://ghe.example.com/{user}.keys"]).exit_code == 0
