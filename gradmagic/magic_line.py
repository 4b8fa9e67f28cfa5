"""Splitting a magic line into words without cutting Python expressions apart.

IPython's `arg_split` splits at every space, so `--check x=tf.constant([1., 2.])`
would become two words. Here a word ends only at whitespace outside brackets
and strings, found with Python's own tokenizer; the words then go to the
magic's `argparse` parser.
"""

import io
import tokenize

from gradmagic.errors import GradmagicError

_OPENING = "([{"
_CLOSING = ")]}"
_SKIPPED = (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT)


def split_words(line: str) -> list[str]:
    """Split `line` at whitespace that is outside brackets and strings.

    `name (x, y)` stays one word, so a signature may have a space before its
    parenthesis.
    """
    text = line.strip()
    words: list[str] = []
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
                words.append(text[word_start:word_end])
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
        words.append(text[word_start:word_end])
    return words


def _opens_call(text: str, word_start: int, word_end: int, token: tokenize.TokenInfo) -> bool:
    """True for the `(` of `name (x)`: a parenthesis right after a bare name."""
    return token.string == "(" and text[word_start:word_end].isidentifier()
