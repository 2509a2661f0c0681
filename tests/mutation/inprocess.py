"""One pure test file against every mutant of a module, in one process (no pytest session each).

    python tests/mutation/inprocess.py wire tests/test_ingest_wire_edges.py [MUTANT ...]

`run.py` runs a pytest session per mutant: on a shared 2-core machine that is ten seconds or
more each (Django, imports, collection), hours for a module of 800 mutants. This script imports
the mutants that `run.py` already generated (var/mutation/<name>/mutants/, run.py must have run
once for the module), imports the test file once, and for each mutant sets mutmut's
MUTANT_UNDER_TEST -- the switch mutmut's own trampoline reads on every call -- and calls every
test function (parametrized cases expanded) until one fails. A mutant is "killed" when a test
raises, as under pytest -x; each test gets 10 s (SIGALRM), a timeout counts as killed.

Only for a test file whose tests take no fixtures (pure functions, no database); for a module's
whole map, fixtures and database included, see session.py. The figure is
the kill ratio of THAT FILE alone: a lower bound of what the module's whole test map kills.
Prints one line per surviving mutant and the ratio; writes var/mutation/<name>/inprocess.txt.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "mutation"))
from run import MODULES, SCRATCH  # noqa: E402


class _Timeout(Exception):
    pass


def _alarm(*_args):
    raise _Timeout()


def cases_of(module) -> list[tuple[str, object, dict]]:
    cases = []
    for name, fn in vars(module).items():
        if not name.startswith("test_") or not inspect.isfunction(fn):
            continue
        marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
        if not marks:
            if inspect.signature(fn).parameters:
                raise SystemExit(f"{name} takes fixtures: not a pure test")
            cases.append((name, fn, {}))
            continue
        argnames, values = marks[0].args[0], marks[0].args[1]
        if isinstance(argnames, str):
            argnames = [a.strip() for a in argnames.split(",")]
        for i, vals in enumerate(values):
            vals = vals if len(argnames) > 1 else (vals,)
            cases.append((f"{name}[{i}]", fn, dict(zip(argnames, vals, strict=True))))
    return cases


def first_failure(cases) -> str | None:
    for name, fn, kwargs in cases:
        signal.alarm(10)
        try:
            fn(**kwargs)
        except BaseException as exc:  # noqa: BLE001 -- any exception is the test failing
            signal.alarm(0)
            return f"{name}: {type(exc).__name__}"
        signal.alarm(0)
    return None


def main() -> int:
    name, test_file, *only = sys.argv[1:]
    target = MODULES[name][0]
    mutants = SCRATCH / name / "mutants"
    meta = json.loads((mutants / (target + ".meta")).read_text())
    names = only or sorted(meta["exit_code_by_key"])
    sys.path.insert(0, str(mutants))
    os.environ["MUTANT_UNDER_TEST"] = ""
    spec = importlib.util.spec_from_file_location("_inprocess_tests", ROOT / test_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    mutated = sys.modules[target[:-3].replace("/", ".")]
    if not Path(mutated.__file__).is_relative_to(mutants):
        raise SystemExit(f"{target} was imported from {mutated.__file__}, not the mutants")
    cases = cases_of(module)
    signal.signal(signal.SIGALRM, _alarm)
    clean = first_failure(cases)
    if clean:
        raise SystemExit(f"fails on the unmutated code: {clean}")
    survived = []
    for mutant in names:
        os.environ["MUTANT_UNDER_TEST"] = mutant
        if first_failure(cases) is None:
            survived.append(mutant)
            print(f"  survived: {mutant}", flush=True)
    os.environ["MUTANT_UNDER_TEST"] = ""
    killed = len(names) - len(survived)
    text = (f"{name} ({target}), {test_file} alone, in-process: kill ratio "
            f"{killed / len(names):.1%} = {killed}/{len(names)} ({len(cases)} test cases)")
    print(text)
    if not only:
        (SCRATCH / name / "inprocess.txt").write_text(
            text + "\n" + "".join(f"  survived: {m}\n" for m in survived))
    return 0


if __name__ == "__main__":
    sys.exit(main())
