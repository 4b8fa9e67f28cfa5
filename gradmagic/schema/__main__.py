"""`python -m gradmagic.schema [--check]`: write (or check) the JSON Schemas and the extension's TypeScript types
that the dataclasses of gradmagic/report.py make."""

import argparse
import sys

from gradmagic.schema import COMMAND, files, stale


def main() -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--check", action="store_true", help="write nothing; exit with 1 if a file would change")
    arguments = parser.parse_args()
    changed = stale()
    if arguments.check:
        for path in changed:
            print(f"{path} differs from what the dataclasses make: run {COMMAND}", file=sys.stderr)
        return 1 if changed else 0
    for path, text in files().items():
        if path in changed:
            path.write_text(text)
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
