"""Small ports of Go standard-library behaviour the watches file relies on."""
from __future__ import annotations

import os
import re
from decimal import Decimal
from typing import Callable, Mapping

_UNITS = {  # nanoseconds
    "ns": 1,
    "us": 1000,
    "\u00b5s": 1000,  # U+00B5 micro sign
    "\u03bcs": 1000,  # U+03BC Greek mu
    "ms": 1000 ** 2,
    "s": 1000 ** 3,
    "m": 60 * 1000 ** 3,
    "h": 3600 * 1000 ** 3,
}
_MAX_NANOSECONDS = 2 ** 63 - 1


class DurationError(ValueError):
    pass


def parse_duration(s: str) -> float:
    """time.ParseDuration: "300ms", "-1.5h", "2h45m", "0", ".5s", "5.m". Returns seconds (float).
    The collection's module_utils/durations.py reads the same grammar (this package may not
    import the collection): tests/test_duration_grammar.py holds both to one table."""
    if not isinstance(s, str):
        raise DurationError(f"time: invalid duration {s!r}")
    orig = s
    neg = False
    if s and s[0] in "+-":
        neg = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise DurationError(f'time: invalid duration "{orig}"')
    total = 0
    while s:
        if not (s[0] == "." or s[0].isdigit()):
            raise DurationError(f'time: invalid duration "{orig}"')
        m = re.match(r"([0-9]*)(?:\.([0-9]*))?", s)
        int_part, frac_part = m.group(1), m.group(2)
        pre = int_part != ""
        post = bool(frac_part)
        if not pre and not post:
            raise DurationError(f'time: invalid duration "{orig}"')
        s = s[m.end():]
        i = 0
        while i < len(s) and not (s[i] == "." or s[i].isdigit()):
            i += 1
        if i == 0:
            raise DurationError(f'time: missing unit in duration "{orig}"')
        unit, s = s[:i], s[i:]
        if unit not in _UNITS:
            raise DurationError(f'time: unknown unit "{unit}" in duration "{orig}"')
        if len(int_part.lstrip("0")) > 19:  # Go: leadingInt overflows its int64
            raise DurationError(f'time: invalid duration "{orig}"')
        # whole nanoseconds, each term truncated, as Go counts them
        total += int(Decimal(f"{int_part or '0'}.{frac_part or '0'}") * _UNITS[unit])
        if total > _MAX_NANOSECONDS + neg:  # Go: the sum overflows time.Duration
            raise DurationError(f'time: invalid duration "{orig}"')
    return (-total if neg else total) / 1e9


def format_duration(seconds: float) -> str:
    """A compact Go-like rendering (for logs)."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    out = []
    rest = seconds
    for unit, size in (("h", 3600), ("m", 60)):
        if rest >= size:
            q = int(rest // size)
            out.append(f"{q}{unit}")
            rest -= q * size
    if rest or not out:
        out.append(f"{rest:g}s")
    return "".join(out)


# --- os.Expand -------------------------------------------------------------------------

def _is_shell_special_var(c: str) -> bool:
    return c in "*#$@!?-0123456789"


def _is_alnum(c: str) -> bool:
    return c == "_" or "0" <= c <= "9" or "a" <= c <= "z" or "A" <= c <= "Z"


def _get_shell_name(s: str) -> tuple[str, int]:
    if s[0] == "{":
        if len(s) > 2 and _is_shell_special_var(s[1]) and s[2] == "}":
            return s[1:2], 3
        for i in range(1, len(s)):
            if s[i] == "}":
                if i == 1:
                    return "", 2  # bad syntax; eat "${}"
                return s[1:i], i + 1
        return "", 1  # bad syntax; eat "${"
    if _is_shell_special_var(s[0]):
        return s[0:1], 1
    i = 0
    while i < len(s) and _is_alnum(s[i]):
        i += 1
    return s[:i], i


def go_expand(s: str, mapping: Callable[[str], str]) -> str:
    """os.Expand."""
    buf: list[str] | None = None
    i = 0
    j = 0
    while j < len(s):
        if s[j] == "$" and j + 1 < len(s):
            if buf is None:
                buf = []
            buf.append(s[i:j])
            name, w = _get_shell_name(s[j + 1:])
            if name == "" and w > 0:
                pass  # invalid syntax; eat the characters
            elif name == "":
                buf.append(s[j])  # "$" not followed by a name: keep it
            else:
                buf.append(mapping(name))
            j += w
            i = j + 1
        j += 1
    if buf is None:
        return s
    return "".join(buf) + s[i:]


def replace_env_variables(text: str, environ: Mapping[str, str] | None = None) -> str:
    """watches.replaceEnvVariables: ${VAR} / $VAR -> value; unset variables stay as ${VAR}."""
    env = os.environ if environ is None else environ

    def mapping(name: str) -> str:
        if name in env:
            return env[name]
        return "${" + name + "}"

    return go_expand(text, mapping)


_ATOI = re.compile(r"[+-]?[0-9]+\Z")


def go_atoi(s: str) -> int:
    """strconv.Atoi: optional sign and decimal digits only (no spaces, no underscores)."""
    if not isinstance(s, str) or not _ATOI.match(s):
        raise ValueError(f'strconv.Atoi: parsing "{s}": invalid syntax')
    return int(s)
