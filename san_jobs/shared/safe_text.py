"""Log lines that say only what happened: one record is one line, whatever the values
it holds, and no secret of a connection string reaches a log or a terminal.

Shared by every program of the project (job-service, ai-gateway, san-web, jobsctl).

- `escape_control` writes control characters as visible escapes (a newline as
  ``\\n``, NUL as ``\\x00``, ESC as ``\\x1b``, U+2028 as ``\\u2028``): a value sent by a
  caller (a cancel reason, an upstream error) cannot start a forged log line, move a
  terminal's cursor or put NUL bytes into a file. Unicode format characters (category
  Cf: U+202E RIGHT-TO-LEFT OVERRIDE and the other bidi controls, zero-width
  characters, tags) are escaped too: invisible, some reverse what follows them, so a
  target id could make its job's line read "FAILED".
- `escape_json_unsafe` does the same inside JSON text (``\\u`` escapes, lossless).
- `mask_secrets` replaces the password of every ``scheme://user:password@`` URL (and
  ``password=...`` settings) in a text with ``***``.
- `SafeFormatter` applies both to every rendered record; a traceback keeps its lines,
  each indented, so it stays readable and none of them can pass for a record.
"""

from __future__ import annotations

import logging
import re

JOINERS = "\u200c\u200d"
"""ZERO WIDTH NON-JOINER and ZERO WIDTH JOINER: format characters that emoji sequences
(U+1F469 U+200D U+1F4BB is one picture) and Persian and Indic writing need, and that
move nothing. Kept in free text shown to people; escaped everywhere else."""
_FORMAT_BUT_JOINERS = (
    "\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b\u200e\u200f"
    "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
    "\U000e0020-\U000e007f"
)
FORMAT_CHARACTERS = _FORMAT_BUT_JOINERS + JOINERS
"""The Unicode format characters (category Cf, as of Unicode 15.1), as the inside of
a regular expression's character class; a test checks it against ``unicodedata``."""
# C0 (tab and newline included), DEL, C1, the Unicode line and paragraph separators
# (line breaks to many readers), lone surrogates (a stream encoding to UTF-8 fails on
# them: the line would be lost with a "Logging error"), and the format characters.
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff{FORMAT_CHARACTERS}]")
# The same, newline and joiners excepted: for multi-line text shown to people (a TIL
# note's body).
_CONTROL_BUT_NEWLINE = re.compile(
    f"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff{_FORMAT_BUT_JOINERS}]"
)
# What JSON's encoder leaves raw inside a string (ensure_ascii=False; it escapes C0
# itself) that some line readers would break on, a UTF-8 stream could not encode, or a
# terminal would obey.
_JSON_UNSAFE = re.compile(f"[\x7f-\x9f\u2028\u2029\ud800-\udfff{FORMAT_CHARACTERS}]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

MASK = "***"
# scheme://user:password@ — the password runs to the last "@" of the URL (a password
# may hold an unencoded "@" or "/": masking a little too much beats leaking the end
# of a password).
_URL_PASSWORD = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/?#@'\"]*):(?P<password>[^\s'\"]*)@"
)
# libpq-style settings (`host=db password=...`), as some driver messages echo them.
_SETTING_PASSWORD = re.compile(r"(?i)(?P<head>\bpass(?:word|wd)\s*=\s*)(?P<password>[^\s&;,'\"]+)")


def _escape_one(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED_ESCAPES.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def escape_control(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with every control character (C0, DEL, C1, U+2028/U+2029, lone
    surrogates, format characters) written as a visible escape: ``"a\\nb"`` becomes
    ``"a\\\\nb"``, U+202E ``\\u202e``. With `keep_newlines`, "\\n" stays a line break
    and the JOINERS stay (for multi-line free text shown in a table cell). Backslashes
    are left as they are: the output is for reading, not parsing."""
    if text.isprintable():  # the common case, checked in C: nothing to escape
        return text
    pattern = _CONTROL_BUT_NEWLINE if keep_newlines else _CONTROL
    return pattern.sub(_escape_one, text)


def _json_escape_one(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON writes a character beyond the BMP as a surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def escape_json_unsafe(json_text: str) -> str:
    """JSON text (from an encoder that keeps non-ASCII, whose every non-ASCII
    character is then inside a string) with DEL, C1, U+2028/U+2029, lone surrogates and
    format characters as ``\\u`` escapes: the same JSON value, safe on a terminal line."""
    if json_text.isprintable():  # checked in C; rare: nothing to escape
        return json_text
    return _JSON_UNSAFE.sub(_json_escape_one, json_text)


def mask_secrets(text: str) -> str:
    """`text` with the password of every ``scheme://user:password@host`` URL, and of
    every ``password=...`` setting, replaced by ``***``: for startup errors, log lines
    and anything else that may quote a database URL."""
    # Substring checks first: a log line pays for a regex only when it may hold a secret.
    if "://" in text and "@" in text:
        text = _URL_PASSWORD.sub(rf"\g<head>:{MASK}@", text)
    if "passw" in text.lower():
        text = _SETTING_PASSWORD.sub(rf"\g<head>{MASK}", text)
    return text


def safe_text(text: str) -> str:
    """`text` ready for one line of a log or a terminal: secrets masked, control
    characters escaped."""
    return escape_control(mask_secrets(text))


def _continuation_lines(block: str) -> str:
    # Split on "\n" only: any other line break inside is escaped, not obeyed.
    return "\n".join("  " + safe_text(line) for line in block.split("\n"))


class SafeFormatter(logging.Formatter):
    """`logging.Formatter` whose output cannot forge a record: the rendered line (the
    message and every other field of the format) goes through `safe_text`, and an
    exception's traceback or a stack follows on lines of its own, each indented by two
    spaces and escaped the same way.

    Mix it in before another formatter class to keep that class's format
    (``class F(SafeFormatter, uvicorn.logging.DefaultFormatter)``)."""

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        line = safe_text(self.formatMessage(record))
        # Set by san_jobs.shared.trace_logging while a span is current: a line without a
        # trace stays exactly as it was.
        trace_id = getattr(record, "trace_id", "")
        if trace_id:
            line += " trace_id=" + safe_text(str(trace_id))
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line += "\n" + _continuation_lines(record.exc_text)
        if record.stack_info:
            line += "\n" + _continuation_lines(self.formatStack(record.stack_info))
        return line
