"""EVALB's command line: `python -m t2t_lite.evalb -p PARAM_FILE GOLD TEST`.

Prints EVALB's report to stdout (see `t2t_lite.metrics.evalb`). Options as in EVALB:
`-p` parameter file (default: COLLINS.prm's settings), `-d` debug (bracket lists on stderr),
`-e N` stop after N error sentences (overrides MAX_ERROR), `-h` help; plus `--style 2006|1997`
for the report layout and `--ignore_outer_bracket`.

The label-less outer bracket `( (S ...) )` of PTB files counts as a constituent with the empty
label, as in EVALB: by default the figures are EVALB's own, for files scored as they are.
`--ignore_outer_bracket` drops label-less brackets instead, as if they were `TOP`: scores then
match those of the same trees with the outer bracket stripped (preprocessed trees), but they are
not EVALB's figures for files that keep it.

Exit status: 0, 1 when MAX_ERROR stopped the run early (the summary then covers the sentences
read so far), 2 on unreadable or malformed input.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from t2t_lite.metrics import evalb


def _arguments(argv):
    parser = argparse.ArgumentParser(
        prog="python -m t2t_lite.evalb",
        description="EVALB bracketing scores (Sekine & Collins) of TEST trees against GOLD trees, "
        "one tree per line.",
    )
    parser.add_argument("-p", dest="param_file", help="EVALB parameter file, e.g. COLLINS.prm")
    parser.add_argument("-d", dest="debug", action="store_true", help="print brackets to stderr")
    parser.add_argument("-e", dest="max_error", type=int, help="number of errors to stop at")
    parser.add_argument("--style", choices=evalb.STYLES, default="2006", help="report layout")
    parser.add_argument(
        "--ignore_outer_bracket",
        action="store_true",
        help="do not count label-less brackets such as the outer '( (S ...) )' of PTB files "
        '(default: count them with the label "", as EVALB does); gives the scores of the '
        "same trees with the outer bracket stripped, not EVALB's own figures",
    )
    parser.add_argument("gold", help="gold trees, one per line")
    parser.add_argument("test", help="parsed trees, one per line (empty line: parse failure)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    """Runs EVALB on the files named in `argv`; returns the exit status."""
    args = _arguments(argv)
    try:
        params = evalb.load_params(args.param_file) if args.param_file else evalb.COLLINS
        if args.max_error is not None:
            params = dataclasses.replace(params, max_error=args.max_error)
        result = evalb.evalb_files(
            args.gold, args.test, params, ignore_outer_bracket=args.ignore_outer_bracket
        )
    except (OSError, UnicodeDecodeError, ValueError) as error:
        print(f"evalb: {error}", file=sys.stderr)
        return 2
    if args.debug or params.debug:
        sys.stderr.write(evalb.format_debug(result))
    if args.style == "1997":
        for row in result.sentences:
            if row.message:
                print(row.message, file=sys.stderr)
    sys.stdout.write(evalb.format_report(result, style=args.style))
    if result.stopped_early:
        print(
            f"evalb: stopped after {params.max_error} error sentences (MAX_ERROR); the summary "
            f"covers the first {len(result.sentences)} sentences only. Fix the inputs or raise "
            "the limit with -e N.",
            file=sys.stderr,
        )
        return 1
    return 0


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
