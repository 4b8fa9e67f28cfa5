"""Splitting a magic line into words without cutting Python expressions apart.

IPython's `arg_split` splits at every space, so `--check x=tf.constant([1., 2.]) * 2`
would become four words. Here a word ends only at whitespace outside brackets
and strings, found with Python's own tokenizer; and an example input, `ARG=EXPR`,
goes on over spaces for as long as EXPR stays a Python expression (up to the next
option or `ARG=`). The words then go to the magic's `argparse` parser.
"""

import io
import keyword
import re
import tokenize

from gradmagic.errors import GradmagicError

_OPENING = "([{"
_CLOSING = ")]}"
_SKIPPED = (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT)
#: `x=...` (or `--check=x=...`): a word that starts an example input (not `x==...`, a comparison).
_EQUALS = re.compile(r"=(?!=)")
_EXAMPLE = re.compile(r"(?:--[\w-]+=)?([^\W\d]\w*)\s*=(?!=)")


def split_words(line: str) -> list[str]:
    """Split `line` at whitespace that is outside brackets and strings, keeping `ARG=EXPR` whole.

    `name (x, y)` stays one word, so a signature may have a space before its
    parenthesis. `x=tf.constant([1., 2.]) * 2` is one word: after `ARG=`, the
    following words join EXPR as long as the longer text is still a Python
    expression, and until a word that starts an option (`--rtol`) or another
    input (`y=...`).
    """
    text = line.strip()
    spans = _word_spans(text)
    words: list[str] = []
    k = 0
    while k < len(spans):
        start, end = spans[k]
        last = k
        if k + 1 < len(spans) and text[start:end].isidentifier() and _EQUALS.match(text[spans[k + 1][0] :]):
            last = k + 1  # `x = EXPR`, spaces around the `=`
        expression = _expression_start(text[start : spans[last][1]])
        if expression is not None:
            end = len(spans)
            for later in range(last + 1, len(spans)):
                word = text[spans[later][0] : spans[later][1]]
                if word.startswith("--") or _expression_start(word) is not None:
                    end = later
                    break
                if _is_expression(text[start + expression : spans[later][1]]):
                    last = later
            if last + 1 < end:
                _refuse_broken_expression(text, start, expression, spans[last + 1], spans[end - 1][1])
        words.append(text[start : spans[last][1]])
        k = last + 1
    return words


def _word_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each word: whitespace outside brackets and strings separates words."""
    spans: list[tuple[int, int]] = []
    word_start = word_end = None
    depth = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in _SKIPPED:
                continue
            start, end = token.start[1], token.end[1]
            if word_start is None:
                word_start = start
            elif depth == 0 and start > word_end and not _opens_call(text, word_start, word_end, token):
                spans.append((word_start, word_end))
                word_start = start
            if token.string in _OPENING:
                depth += 1
            elif token.string in _CLOSING:
                depth -= 1
            word_end = end
    except (tokenize.TokenError, SyntaxError) as error:
        raise GradmagicError(
            f"Cannot read the magic line `{text}`: a bracket or a quote is not closed ({error.args[0]})."
        ) from None
    if word_start is not None:
        spans.append((word_start, word_end))
    return spans


def _refuse_broken_expression(text: str, start: int, expression: int, following: tuple[int, int], end: int) -> None:
    """After `ARG=EXPR`, a word that can start neither an expression nor a name (`+*`, `)`): it was meant as part of
    EXPR, which is then no Python expression. GradmagicError naming the input and Python's reason (else argparse
    would call the word an unrecognized argument)."""
    word = text[following[0] : following[1]]
    if _is_expression(word) or word[:1].isalnum() or word[:1] in "_([{'\"":
        return
    typed = text[start:end]
    expression_text = text[start + expression : end].strip()
    try:
        compile(expression_text, "<magic line>", "eval")
    except SyntaxError as error:
        reason = error.msg
    else:  # not reached: the whole text would have been joined
        return
    raise GradmagicError(
        f"The example input `{typed}` is not a Python expression: {reason} in `{expression_text}`, at `{word}`. "
        "EXPR is evaluated in the notebook as Python: write it as Python reads it (spaces are allowed)."
    )


def is_example_input(word: str) -> bool:
    """Whether `word` reads as an example input, `ARG=EXPR`."""
    return _expression_start(word) is not None


def _expression_start(word: str) -> int | None:
    """Where EXPR starts in a word that starts an example input, `ARG=EXPR`; None for another word."""
    found = _EXAMPLE.match(word)
    return found.end() if found is not None and not keyword.iskeyword(found.group(1)) else None


def _is_expression(text: str) -> bool:
    try:
        compile(text.strip(), "<magic line>", "eval")
    except (SyntaxError, ValueError):
        return False
    return True


def _opens_call(text: str, word_start: int, word_end: int, token: tokenize.TokenInfo) -> bool:
    """True for the `(` of `name (x)`: a parenthesis right after a bare name."""
    return token.string == "(" and text[word_start:word_end].isidentifier()
