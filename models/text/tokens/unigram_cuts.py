"""The Unigram family's cut rule (SentencePiece's Metaspace pre-tokenizer and Unigram model):
besides the white space every family cuts at, a head-side cut inside a piece, between two
characters that no vocabulary piece holds in a row, so that no Viterbi edge crosses it (the
proof is case (e) of the lemma in :mod:`models.text.tokens.bounded`)."""

from __future__ import annotations

import re
import unicodedata
from typing import Any, cast

from models.text.tokens.char_classes import (
    _EXTEND,
    _JAMO,
    _PREPEND,
    _WS,
    Form,
    _class,
    _composes_back,
    _composition_seconds,
    _stable,
)
from models.text.tokens.cut_rule import CutRule


def piece_normalizers(norms: list[dict[str, Any]]) -> bool:
    """Normalizers acting per character, per normalization segment, per grapheme cluster or
    on runs of spaces only (XLM-R's ``Replace`` of `` {2,}``): what a cut inside a piece
    between two characters each kept as it is may rely on."""
    for n in norms:
        kind = n.get("type")
        if kind == "Replace":
            pattern = (n.get("pattern") or {}).get("Regex") or (n.get("pattern") or {}).get(
                "String", "x"
            )
            if re.sub(r"\{\d*,?\d*\}|[+*]", "", pattern).strip(" ") or " " not in pattern:
                return False  # (a run of anything but spaces could span the cut)
        elif kind not in ("NFC", "NFD", "NFKC", "NFKD", "Precompiled", "Lowercase"):
            return False
    return True


def unigram_rule(
    name: str,
    both: re.Pattern[str],
    tokenizer: Any,
    kinds: list[str],
    pre: dict[str, Any],
    model: dict[str, Any],
    added_chars: set[str],
) -> CutRule:
    """Metaspace + Unigram: besides ``both``, a head-side cut inside a piece between two
    characters that no vocabulary piece holds in a row (the lemma's Unigram case)."""
    vocab = [str(v[0]) for v in model.get("vocab") or []]
    scores = [float(v[1]) for v in model.get("vocab") or []]
    pieces = set(vocab)
    fallback = bool(model.get("byte_fallback"))
    # A fused run of unknown characters is looked up whole: with byte fallback every byte must
    # have its token (else the run is one <unk> or bytes depending on its length), and a run
    # must never be a piece: k >= 2 unknown characters score k x (min - 10), below any piece
    # (>= min) when min < 10, so a piece holding them would have won the Viterbi path.
    if (fallback and any(f"<0x{b:02X}>" not in pieces for b in range(256))) or (
        not scores or min(scores) >= 10
    ):
        return CutRule(name, both)
    precompiled = "Precompiled" in kinds
    normalize = tokenizer.normalizer.normalize_str if tokenizer.normalizer else (lambda c: c)
    replacement = str(pre.get("replacement", "\u2581"))
    held = {c for p in vocab for c in p}
    joins = re.compile(f"[{_JAMO}{_PREPEND}{_EXTEND}\u200d]")
    seconds = _composition_seconds()
    forms = [cast(Form, k) for k in kinds if k in ("NFC", "NFD", "NFKC", "NFKD")]
    cut: list[int] = []
    after: list[int] = []
    marks: list[int] = []
    for code in range(0x21, 0x10000):
        c = chr(code)
        if 0xD800 <= code < 0xE000:
            continue
        cat = unicodedata.category(c)
        if cat[0] == "M" or unicodedata.combining(c) or joins.match(c) or not _stable(c):
            after.append(code)  # may join the character before it (cluster, segment)
            if cat[0] != "M" or joins.match(c) or not _stable(c) or code in seconds:
                continue
        elif any(_composes_back(c, f) for f in ("NFC", "NFKC")):
            after.append(code)
            continue
        if cat[0] not in "LNPSM" or _WS.match(c) or c == replacement or c in added_chars:
            continue
        if normalize(c) != c or any(
            unicodedata.normalize(f, c) != c or unicodedata.ucd_3_2_0.normalize(f, c) != c
            for f in forms
        ):
            continue
        (marks if cat[0] == "M" else cut).append(code)
    # White space the normalizer keeps as it is (a newline, a tab: Metaspace splits at U+0020
    # only) may end the prefix; it never starts the suffix, where an added token's lstrip
    # could take it (no cut after a CR: CR LF is one cluster).
    kept = [c for c in (9, 10, 11, 12, 0x85, 0x2028, 0x2029) if normalize(chr(c)) == chr(c)]
    body = _class(cut)
    pattern = (
        f"(?<=[{_class(sorted(cut + kept))}])(?<![{_PREPEND}\\r].)(?=[{body}](?![{_class(after)}]))"
    )
    bigrams = frozenset(p[i : i + 2] for p in vocab for i in range(len(p) - 1))
    # Unknown characters, fused into one <unk> (no byte fallback): under Precompiled only
    # those of the cut class (one grapheme cluster each); otherwise marks too (no composition
    # second among them, so a run of them only reorders under any normal form).
    unknown = [c for c in (cut if precompiled else sorted(cut + marks)) if chr(c) not in held]
    name += "; inside a piece between two characters no vocabulary piece holds in a row (head)"
    return CutRule(
        name,
        both,
        piece=re.compile(pattern),
        bigrams=bigrams,
        unknown=None if fallback or not unknown else re.compile(f"[{_class(unknown)}]*"),
    )
