"""gradmagic.check on a corpus of real-world custom gradients (benchmarks/corpus.py): bugs caught, false alarms.

Every case is written after public code (TensorFlow's documentation and tests, TensorFlow Probability, Keras,
Larq, QKeras, gradient-reversal layers, sparsemax and entmax, ...), cited in the corpus. For each it prints the
expectation, the verdict, the problem codes, the outcome (right / caught / missed / false alarm), whether the
codes name the mistake precisely (or the surrogate pattern is named), whether the wrong element is located, and
the check's time; then the summary.

Run: .venv/bin/python benchmarks/bench_corpus.py [NAME-SUBSTRING]
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow as tf  # noqa: E402
from corpus import BUG, CASES, CORRECT, SURROGATE, judge, run_case  # noqa: E402

tf.get_logger().setLevel("ERROR")


def _mark(value) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def main(selected: str = "") -> None:
    cases = [case for case in CASES if selected.lower() in case.name.lower()]
    print(
        f"{'case':52s} {'expected':34s} {'verdict':9s} {'outcome':12s} {'precise':7s} {'located':7s} {'time':>7s}"
        "  codes"
    )
    rows = []
    started = time.perf_counter()
    for case in cases:
        start = time.perf_counter()
        try:
            report = run_case(case)
        except Exception as error:  # noqa: BLE001 - a crash of the checker is a result to show, not to hide
            seconds = time.perf_counter() - start
            print(f"{case.name:52s} {case.expectation[:34]:34s} {'CRASH':9s} {type(error).__name__}: {error}"[:200])
            rows.append((case, None, seconds))
            continue
        seconds = time.perf_counter() - start
        judgement = judge(case, report)
        outcome = judgement.outcome + (" (known)" if case.known_failure and not judgement.met else "")
        codes = ",".join(dict.fromkeys(report.codes()))
        print(
            f"{case.name[:52]:52s} {case.expectation[:34]:34s} {report.verdict:9s} {outcome:12s} "
            f"{_mark(judgement.precise):7s} {_mark(judgement.located):7s} {seconds * 1e3:5.0f}ms  {codes}"
        )
        if not judgement.met:
            print(f"{'':52s} -> {judgement.detail}" + (f" [known: {case.known_failure}]" if case.known_failure else ""))
        rows.append((case, judgement, seconds))
    _summary(rows, time.perf_counter() - started)


def _summary(rows, total: float) -> None:
    judged = [(case, judgement) for case, judgement, _ in rows if judgement is not None]
    bugs = [j for case, j in judged if case.kind == BUG]
    correct = [j for case, j in judged if case.kind == CORRECT]
    declared = [j for case, j in judged if case.kind == SURROGATE and case.declared]
    undeclared = [j for case, j in judged if case.kind == SURROGATE and not case.declared]
    with_element = [j for case, j in judged if case.kind == BUG and case.element]
    crashes = sum(judgement is None for _, judgement, _ in rows)
    known = sum(1 for case, j in judged if case.known_failure and not j.met)
    print(
        f"\n{len(rows)} cases: {sum(c.kind == CORRECT for c, _, _ in rows)} correct, "
        f"{sum(c.kind == BUG for c, _, _ in rows)} bugs, {sum(c.kind == SURROGATE for c, _, _ in rows)} surrogates "
        f"({len(declared)} declared, {len(undeclared)} undeclared); {total:.1f} s in all"
    )
    print(
        f"bugs caught:           {sum(j.outcome == 'caught' for j in bugs)}/{len(bugs)} "
        f"(missed {sum(j.outcome == 'missed' for j in bugs)})"
    )
    print(f"precise codes:         {sum(bool(j.precise) for j in bugs)}/{len(bugs)}")
    print(f"located:               {sum(bool(j.located) for j in with_element)}/{len(with_element)}")
    known_correct = sum(1 for case, j in judged if case.kind == CORRECT and case.known_failure and not j.met)
    print(
        f"false alarms:          {sum(not j.met for j in correct)}/{len(correct)} correct ops "
        f"({known_correct} known), "
        f"{sum(j.outcome == 'false alarm' for j in declared)}/{len(declared)} declared surrogates"
    )
    print(
        f"surrogates named:      {sum(j.met for j in undeclared)}/{len(undeclared)} undeclared "
        f"(failed but unnamed: {sum(j.outcome == 'right' and not j.met for j in undeclared)})"
    )
    print(
        f"expectations met:      {sum(j.met for _, j in judged)}/{len(rows)}"
        f" (known failures: {known}, checker crashes: {crashes})"
    )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
