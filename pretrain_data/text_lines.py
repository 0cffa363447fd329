"""Reading a corpus file into lines, as the TFRecord builder and build_vocab.py read it: a UTF-8
text file, plain or compressed (.gz, .bz2, .xz), read as a stream a bounded piece at a time, its
lines stripped, a line longer than max_line_chars split at whitespace into pieces of about a
sentence; and the documents of an OpenWebText archive. Where a file stops being readable text,
UnreadableText says where, after the lines before it.
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import lzma
import os
import tarfile
import zlib
from typing import Callable, Iterable, Iterator

MAX_LINE_CHARS = 10000  # no paragraph is this long; the packing keeps ~600 characters of a line
PIECE_CHARS = 100  # the pieces of a longer line: about a sentence
_READ_BYTES = 1 << 20
_DECOMPRESS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
# What reading a file or an archive raises when it is unreadable, truncated or corrupt (and
# TensorFlow's OpError, for tf.io.gfile).
_READ_ERRORS = (OSError, EOFError, lzma.LZMAError, zlib.error, tarfile.TarError)


class UnreadableText(Exception):
    """Text that cannot be read on from byte `offset` (of the decompressed text or archive), in
    line `line` when it is known; the lines before that line were read."""

    def __init__(self, reason: str, offset: int, line: int | None = None):
        super().__init__(reason, offset, line)
        self.reason, self.offset, self.line = reason, offset, line

    def __str__(self) -> str:
        return f"{self.reason} at byte {self.offset}" + (f", line {self.line}" if self.line else "")


def _ignore(line: int, chars: int) -> None:
    pass


def _texts(stream) -> Iterator[str]:
    """The UTF-8 text of a binary stream, read and decoded a bounded piece at a time. Raises
    UnreadableText where it stops being readable text, after yielding the text before."""
    import tensorflow as tf

    offset, undecoded = 0, b""  # bytes decoded; the start of a character cut by the last read
    while True:
        try:
            data = stream.read(_READ_BYTES)
        except (tf.errors.OpError, *_READ_ERRORS) as e:
            raise UnreadableText(str(e), offset + len(undecoded)) from None
        data, final = undecoded + data, not data
        try:
            text, used = codecs.utf_8_decode(data, "strict", final)
        except UnicodeDecodeError as e:
            yield data[:e.start].decode("utf-8")
            raise UnreadableText(f"not UTF-8 ({e.reason})", offset + e.start) from None
        yield text
        offset, undecoded = offset + used, data[used:]
        if final:
            return


def _split(text: str, final: bool) -> tuple[list[str], str]:
    """The pieces of an over-long line: at most PIECE_CHARS characters each, cut at the last
    space or tab in reach (so that they hold the line's tokens), else after
    PIECE_CHARS characters. Unless `final`, the end that the next read may continue is returned
    uncut."""
    pieces, start = [], 0
    while len(text) - start > PIECE_CHARS:
        end = start + PIECE_CHARS
        cut = max(text.rfind(space, start + 1, end + 1) for space in " \t")
        cut = cut if cut > start else end
        pieces.append(text[start:cut].strip())
        start = cut
    rest = text[start:]
    if final:
        pieces.append(rest.strip())
        rest = ""
    return [piece for piece in pieces if piece], rest


def stripped_lines(texts: Iterable[str], max_line_chars: int = MAX_LINE_CHARS,
                   on_split: Callable[[int, int], None] = _ignore) -> Iterator[str]:
    """The stripped lines of a text given in pieces. Lines end at "\\n" only and every "\\r"
    is dropped, as in the original's tf.io.gfile iteration (TensorFlow's line reader drops
    them: "foo\\rbar" is the word "foobar"). A line longer than max_line_chars comes as its
    pieces (see _split), and on_split(its line number, its length) is called at its end, so
    that no more than max_line_chars characters of a line are ever held."""
    rest = ""  # the current line's text not yet yielded
    split_chars = 0  # > 0 while the current line is over-long: its characters cut into pieces
    pieces_yielded = False  # of the current over-long line
    number = 0  # lines completed

    def end_line(line: str) -> Iterator[str]:
        nonlocal number, split_chars, pieces_yielded
        number += 1
        if not split_chars and len(line) <= max_line_chars:
            yield line.strip()
            return
        pieces, _ = _split(line, final=True)
        yield from pieces
        if not (pieces or pieces_yielded):
            yield ""  # a line of spaces is blank, as the original reads it
        on_split(number, split_chars + len(line))
        split_chars, pieces_yielded = 0, False

    try:
        for text in texts:
            *complete, rest = (rest + text.replace("\r", "")).split("\n")
            for line in complete:
                yield from end_line(line)
            if split_chars or len(rest) > max_line_chars:
                pieces, tail = _split(rest, final=False)
                yield from pieces
                pieces_yielded |= bool(pieces)
                split_chars += len(rest) - len(tail)
                rest = tail
        if rest or split_chars:  # a last line without a final "\n"
            yield from end_line(rest)
    except UnreadableText as e:
        e.line = number + 1
        raise


def read_lines(path: str, max_line_chars: int = MAX_LINE_CHARS,
               on_split: Callable[[int, int], None] = _ignore) -> Iterator[str]:
    """The stripped lines of a UTF-8 text file, decompressed by its extension, read as a stream
    (over-long lines as pieces, see stripped_lines). Raises UnreadableText where the file stops
    being readable text, after the lines before."""
    import tensorflow as tf

    opener = _DECOMPRESS.get(os.path.splitext(path)[1].lower())
    with tf.io.gfile.GFile(path, "rb") as raw:  # opens at the first read, inside _texts
        yield from stripped_lines(_texts(opener(raw) if opener else raw), max_line_chars, on_split)


def openwebtext_documents(path: str, max_line_chars: int,
                          on_split: Callable[[str], Callable[[int, int], None]],
                          on_error: Callable[[str, UnreadableText], None]) -> Iterator[list[str]]:
    """The non-blank lines of each document of an OpenWebText archive: a tar (of any
    compression) whose members are text files, themselves plain or .xz. Over-long lines are
    split as stripped_lines does, on_split(member) telling of them. A document, or the archive,
    that stops being readable is kept up to there and on_error(where, error) told."""
    import tensorflow as tf

    offset = 0
    try:
        with tf.io.gfile.GFile(path, "rb") as raw, tarfile.open(fileobj=raw, mode="r:*") as tar:
            for member in tar:
                offset = tar.offset
                if not member.isfile():
                    continue
                where = f"{path}:{member.name}"
                stream = tar.extractfile(member)
                if member.name.endswith(".xz"):
                    stream = lzma.open(stream)
                lines = []
                try:
                    for line in stripped_lines(_texts(stream), max_line_chars, on_split(where)):
                        if line:
                            lines.append(line)
                except UnreadableText as e:
                    on_error(where, e)
                yield lines
    except (tf.errors.OpError, *_READ_ERRORS) as e:
        on_error(path, UnreadableText(str(e), offset))
