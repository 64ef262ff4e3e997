#!/usr/bin/env bash
# `make deps` (make test runs it first): the Debian packages that some tests run for real,
# installed when they are missing and this is a root shell with apt-get; otherwise one line
# that names the command to run, and a non-zero exit before any test starts.
#   openssh-server  sshd, ssh, ssh-keygen, sftp: tests/security/test_ssh_session_env.py, tests/lifecycle
#   prometheus      prometheus, promtool: tests/observability
set -euo pipefail
missing=()
{ [ -x /usr/sbin/sshd ] && command -v ssh >/dev/null && command -v ssh-keygen >/dev/null && command -v sftp >/dev/null; } \
  || missing+=(openssh-server)
{ command -v prometheus >/dev/null && command -v promtool >/dev/null; } || missing+=(prometheus)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  echo "make deps: installing ${missing[*]} (Debian packages some tests run)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  exit 0
fi
echo "make deps: missing Debian packages ${missing[*]}; run: sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
exit 1
