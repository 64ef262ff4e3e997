"""snake_case / CamelCase conversion of CR spec keys, ported from ansible-operator.

Source: operator-framework/ansible-operator-plugins internal/ansible/paramconv/paramconv.go
(itself based on github.com/iancoleman/strcase). The port is byte-for-byte in behaviour for
ASCII keys, including its quirks:

* ``addWordBoundariesToNumbers`` only splits sequences like ``a12b3`` (letter, digits,
  letter, digits) -> ``a 12 b3``;
* the special words ``HTTP``, ``URL``, ``IP`` (and their plurals ``...s``) are isolated
  with underscores before splitting, except when the whole key is upper case;
* a key starting with an upper-case letter gets a leading ``_`` unless its first word is
  one of the special words;
* only the *first* occurrence of each special word is handled (``strings.Index``).

Go iterates ``wordMapping`` (a map) in random order; the order only matters for keys that
contain several overlapping special words, where Go itself is nondeterministic. We use the
declaration order (HTTP, URL, IP).
"""
from __future__ import annotations

import re
from typing import Any, Callable

_NUMBER_SEQUENCE = re.compile(r"([a-zA-Z])(\d+)([a-zA-Z](\d+))")
# Go: map[string]string{"http": "HTTP", "url": "URL", "ip": "IP"}
WORD_MAPPING = {"http": "HTTP", "url": "URL", "ip": "IP"}


def _add_word_boundaries_to_numbers(s: str) -> str:
    # Go regexp ReplaceAll with template `$1 $2 $3` (non-overlapping, left to right).
    return _NUMBER_SEQUENCE.sub(lambda m: f"{m.group(1)} {m.group(2)} {m.group(3)}", s)


def _go_title(word: str) -> str:
    """cases.Title(language.AmericanEnglish).String(word) for a single ASCII word."""
    out = []
    prev_letter = False
    for ch in word:
        if ch.isalpha():
            out.append(ch.lower() if prev_letter else ch.upper())
            prev_letter = True
        else:
            out.append(ch)
            # digits and apostrophes continue a word for the Title caser
            prev_letter = prev_letter and (ch.isdigit() or ch == "'")
    return "".join(out)


def _translate_word(word: str, init_case: bool) -> str:
    if word in WORD_MAPPING:
        return WORD_MAPPING[word]
    if init_case:
        return _go_title(word)
    return word


def to_camel(s: str) -> str:
    """paramconv.ToCamel."""
    s = _add_word_boundaries_to_numbers(s).strip(" ")
    bits: list[str] = []
    n = ""
    for ch in s:
        if ch in "_ -":
            bits.append(n)
            n = ""
        else:
            n += ch
    bits.append(n)
    return "".join(_translate_word(b, i != 0) for i, b in enumerate(bits))


def _preprocess_word_mapping(value: str) -> str:
    """paramconv.preprocessWordMapping."""
    for word in WORD_MAPPING.values():
        idx = value.find(word)
        if idx < 0:
            continue
        end = idx + len(word)
        if end - 1 == len(value) - 1:
            # special non-plural word at the end
            value = value[:idx] + "_" + value[idx:]
        elif value[end] == "s":
            # plural special word at the end, start or middle
            if end == len(value) - 1:
                value = value[:idx] + "_" + value[idx:end] + "S"
            elif idx == 0:
                value = value[:end] + "S" + "_" + value[end + 1:]
            else:
                value = value[:idx] + "_" + value[idx:end] + "S" + "_" + value[end + 1:]
        elif idx == 0:
            value = value[:end] + "_" + value[end:]
        else:
            value = value[:idx] + "_" + value[idx:end] + "_" + value[end:]
    return value


def _is_upper(c: str) -> bool:
    return "A" <= c <= "Z"


def _is_lower(c: str) -> bool:
    return "a" <= c <= "z"


def to_snake(s: str) -> str:
    """paramconv.ToSnake."""
    s = _add_word_boundaries_to_numbers(s).strip(" ")
    if not s:
        return s  # Go would panic on []rune(s)[0]; keep the (empty) key as is
    prefix = "_" if _is_upper(s[0]) else ""
    bits: list[str] = []
    n = ""
    i_real = -1
    # skip special word handling when the entire string is upper case
    if s.upper() != s:
        s = _preprocess_word_mapping(s)
    length = len(s)
    for i, v in enumerate(s):
        i_real += 1
        # treat acronyms as words, eg for JSONData -> JSON is a whole word
        next_case_is_changed = False
        if i + 1 < length:
            nxt = s[i + 1]
            if (_is_upper(v) and _is_lower(nxt)) or (_is_lower(v) and _is_upper(nxt)):
                next_case_is_changed = True
        if i_real > 0 and n[-1] != "_" and next_case_is_changed:
            # add underscore if next letter case type is changed
            if _is_upper(v):
                bits.append(n.lower())
                n = v
                i_real = 0
            elif _is_lower(v):
                bits.append((n + v).lower())
                n = ""
                i_real = -1
        elif v in " _-":
            # replace spaces/underscores with delimiters
            bits.append(n.lower())
            n = ""
            i_real = -1
        else:
            n += v
    bits.append(n.lower())
    joined = "_".join(bits)
    # prepend an underscore if the word begins with a capital letter
    if bits[0] not in WORD_MAPPING:
        return prefix + joined
    return joined


def _convert_parameter(fn: Callable[[str], str], v: Any) -> Any:
    if isinstance(v, dict):
        return {fn(k): _convert_parameter(fn, val) for k, val in v.items()}
    if isinstance(v, list):
        return [_convert_parameter(fn, x) for x in v]
    return v


def map_to_snake(d: dict[str, Any]) -> dict[str, Any]:
    """paramconv.MapToSnake: converts keys recursively (nested maps and maps inside lists)."""
    return {to_snake(k): _convert_parameter(to_snake, v) for k, v in d.items()}


def map_to_camel(d: dict[str, Any]) -> dict[str, Any]:
    """paramconv.MapToCamel."""
    return {to_camel(k): _convert_parameter(to_camel, v) for k, v in d.items()}
