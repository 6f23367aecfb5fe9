"""Text observations in shared memory, encoded and decoded with NumPy, not a Python step per
character.

Gymnasium keeps a ``Text`` value as ``max_length`` ``int32`` codes (``character_index``, then
padding) and loops in Python over every character: for an 800-character value of a
``Text(1024)`` 67 µs to write and 130 µs per env to read (``benches/text_obs.py``).
:class:`TextCodec` does the same with one UTF-32 ``str.encode``/``bytes.decode`` and a
lookup table; where it does not apply it calls Gymnasium's own function, so results and errors are
Gymnasium's.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, Tuple

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import write_to_shared_memory

#: Charsets whose characters are all below this code point get a lookup table (4 bytes each) from
#: code point to code; others are encoded by Gymnasium.
TABLE_CODE_POINTS = 1 << 16


class TextCodec:
    """The codes of one ``Text`` space (see the module docstring), read from its public
    ``character_list``, ``character_set`` and ``character_index``."""

    def __init__(self, space: spaces.Text):
        self.space = space
        self.size = int(space.max_length)
        self.pad = len(space.character_set)
        chars = space.character_list
        #: code -> Unicode code point, for decoding.
        self.code_points = np.array([ord(c) for c in chars], dtype=np.uint32)
        top = int(self.code_points.max()) if len(chars) else 0
        #: code point -> code (-1: not in the charset), for encoding; None (Gymnasium encodes)
        #: beyond TABLE_CODE_POINTS, or where a character is not a plain ``str`` (a lookup by code
        #: point would ignore its own hash and equality) or ``character_index`` is not ``Text``'s.
        self.codes = None
        plain = (all(type(c) is str for c in chars) and "character_index" not in vars(space)
                 and type(space).character_index is spaces.Text.character_index)
        if plain and top < TABLE_CODE_POINTS:
            codes = np.full(top + 1, -1, dtype=np.int32)
            for c in chars:
                codes[ord(c)] = space.character_index(c)
            self.codes = codes

    def encode_into(self, row: np.ndarray, value: Any) -> bool:
        """Writes ``value``'s codes into ``row`` (``int32``, shape ``(max_length,)``) as
        Gymnasium's ``flatten`` makes them and returns ``True``; returns ``False``, writing
        nothing, for a value this fast path does not take (see the module docstring)."""
        codes = self.codes
        if type(value) is not str or codes is None or len(value) > self.size:
            return False
        try:
            points = np.frombuffer(value.encode("utf-32-le"), dtype=np.uint32)
        except UnicodeEncodeError:  # a lone surrogate: Gymnasium's path says what it makes of it
            return False
        n = points.size
        if n:
            if int(points.max()) >= codes.size:
                return False
            encoded = codes[points]
            if int(encoded.min()) < 0:
                return False
            row[:n] = encoded
        row[n:] = self.pad
        return True

    def decode(self, data: np.ndarray) -> Tuple[str, ...]:
        """The strings of ``data`` (``int32``, shape ``(n, max_length)``), one per row, as
        Gymnasium's ``read_from_shared_memory`` reads them: the whole batch in one pass (one
        mask, one lookup, one ``bytes.decode``), then cut into rows. ``data`` is read once (copied
        first): rows of a shared slot that another process is writing meanwhile (rows an
        asynchronous batch reads past and drops) decode to some string, never to an error.

        Raises:
            IndexError: a code below ``-len(character_list)`` (only corrupt memory holds one), as
                Gymnasium's read raises it.
        """
        data = np.array(data)  # one read: a row changing between the mask and the gather would
        keep = data < self.pad  # index with the padding code
        kept = data[keep]  # a negative code indexes from the end here as in Gymnasium's list
        try:
            text = self.code_points[kept].tobytes().decode("utf-32-le")
        except UnicodeDecodeError:  # a surrogate in the charset
            return tuple(self._slow(values) for values in data)
        ends = np.cumsum(keep.sum(axis=1)).tolist()
        return tuple(text[a:b] for a, b in zip([0] + ends[:-1], ends))

    def _slow(self, values: Sequence[int]) -> str:
        """Gymnasium's expression for one row."""
        chars = self.space.character_list
        return "".join([chars[val] for val in values if val < self.pad])


def writer(space: spaces.Text, index: int, memory: Any):
    """A callable writing one value of ``space`` into row ``index`` of ``memory`` (its shared
    memory over the segment) exactly as ``write_to_shared_memory(space, index, value, memory)``
    does (the same codes, or Gymnasium's error)."""
    size = int(space.max_length)
    row = np.frombuffer(memory.get_obj(), dtype=np.int32)[index * size:(index + 1) * size]
    text = TextCodec(space)

    def write_text(value: Any) -> None:
        if not text.encode_into(row, value):
            try:
                write_to_shared_memory(space, index, value, memory)
            except Exception as e:
                raise does_not_fit(space, index, value) from e

    return write_text


def does_not_fit(space: spaces.Text, env_id: int, value: Any) -> Exception:
    """The error for a value of env ``env_id`` that Gymnasium's ``write_to_shared_memory`` could not
    encode in ``space`` (it raises a bare ``KeyError: 97`` for ``b"a"``, an ``IndexError`` for a
    string too long): a ``TypeError`` for a value that is not a ``str``, else a ``ValueError``
    saying which characters are too many or outside the charset."""
    where = f"env {env_id} returned a Text observation"
    if not isinstance(value, str):
        return TypeError(f"{where} of type {type(value).__name__} ({value!r:.80}); its observation space "
                         f"{space} holds a str")
    if len(value) > int(space.max_length):
        return ValueError(f"{where} of {len(value)} characters; its observation space {space} holds at most "
                          f"{int(space.max_length)}")
    outside = sorted({c for c in value if c not in space.character_set})
    if outside:
        return ValueError(f"{where} with characters outside its observation space's charset: "
                          f"{''.join(outside[:20])!r}{' ...' if len(outside) > 20 else ''}")
    return ValueError(f"{where} that its observation space {space} cannot encode: {value!r:.80}")


def reader(space: spaces.Text, memory: Any, n: int) -> Callable[[], Tuple[str, ...]]:
    """A callable returning ``read_from_shared_memory(space, memory, n)`` for a ``Text`` space
    (see :meth:`TextCodec.decode`)."""
    data = np.frombuffer(memory.get_obj(), dtype=np.int32).reshape((n, int(space.max_length)))
    text = TextCodec(space)
    return lambda: text.decode(data)
