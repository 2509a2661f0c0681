"""`make mutate`: mutation testing of the accounting core with mutmut 3, one module at a time.

Each module is mutated in its own scratch copy of the work tree (var/mutation/<name>/, so the
tree itself is never touched and results are kept between runs: a rerun retests only what
changed) and its mutants are run against the fast test files that cover it -- never the whole
suite, which is far too slow for hundreds of mutants. One worker process: the machines this
runs on are shared.

    python tests/mutation/run.py                 # every module, in the order below
    python tests/mutation/run.py store metrics   # some modules
    python tests/mutation/run.py --list          # the module map

Faster, same mutants and verdicts: `python tests/mutation/session.py NAME` (`make mutate-fast
MODULES=...`) runs every mutant of a module against the same map in ONE pytest session (see its
docstring): a module whose tests need Django and the database takes minutes, not hours
(cost-accounting, 887 mutants: 28 minutes; here a session per mutant took 10-50 s each). It
writes its verdicts into the same .meta files, so the summary below and `mutmut results` agree.

Prints, and writes to var/mutation/<name>/summary.txt, the kill ratio per module and the
surviving mutants (names as `mutmut show NAME` takes them, run inside the scratch copy). A rerun
tests the mutants of functions that changed, and runs the survivors of the previous run again
(so a test added for one counts). The survivors the project keeps, each killed by a test or
explained, are in SURVIVORS.md here.

mutmut 3 mutates code inside functions and methods only: module-level constants (such as the
SQL text of telemetry/store.py) and @property bodies are not mutated. Functions reached only in
a subprocess (the SQLite store, run by the embedded-default tests) have no test in mutmut's map
and are reported as "no tests", apart from the kill ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRATCH = ROOT / "var" / "mutation"

# module name -> (file to mutate, fast test files that cover it). Order: modules nobody is
# rewriting as this was written first, so their figures were stable to measure.
MODULES: dict[str, tuple[str, list[str]]] = {
    "agent-energy": ("collectors/energy.py",
                     ["tests/agent/test_energy.py", "tests/agent/test_energy_boundaries.py"]),
    "store": ("greenops/telemetry/store.py",
              ["tests/telemetry/test_ingest_api.py", "tests/telemetry/test_ingest_fast_paths.py",
               "tests/telemetry/test_ingest_rollup_peaks.py",
               "tests/telemetry/test_ingest_raw_samples.py"]),
    # tests/telemetry/test_wire_properties.py (hypothesis, ~20 s a run) is left out: every
    # surviving mutant of parse_batch would run it in full.
    # tests/telemetry/test_ingest_wire_edges.py pins the edges by hand instead.
    "wire": ("greenops/telemetry/wire.py",
             ["tests/telemetry/test_ingest_api.py", "tests/telemetry/test_ingest_fast_paths.py",
              "tests/telemetry/test_ingest_raw_samples.py", "tests/api/test_hostile_bodies.py",
              "tests/api/test_non_finite_intakes.py", "tests/telemetry/test_ingest_wire_edges.py"]),
    # decode_body and parse_json, which were wire.py's until they moved beside parse_body
    "body": ("greenops/request_body.py",
             ["tests/api/test_hostile_bodies.py", "tests/api/test_non_finite_intakes.py",
              "tests/telemetry/test_ingest_wire_edges.py"]),
    "carbon-accounting": ("greenops/carbon/accounting.py",
                          ["tests/carbon/test_accounting.py", "tests/kpis/test_measure.py",
                           "tests/carbon/test_of_hours.py", "tests/carbon/test_history.py"]),
    "metrics": ("greenops/kpis/metrics.py",
                ["tests/kpis/test_histogram.py", "tests/kpis/test_measure.py",
                 "tests/kpis/test_per_inference.py", "tests/kpis/test_percentile_rank.py",
                 "tests/kpis/test_metrics_merge.py"]),
    "recommend": ("greenops/costs/recommend.py", ["tests/costs/test_recommend.py"]),
    "intensity": ("greenops/carbon/intensity.py", ["tests/carbon/test_accounting.py"]),
    "rollup": ("greenops/kpis/rollup.py", ["tests/kpis/test_rollup.py"]),
    "histogram": ("greenops/kpis/histogram.py",
                  ["tests/kpis/test_histogram.py", "tests/kpis/test_percentile_rank.py",
                   "tests/kpis/test_histogram_edges.py"]),
    "measure": ("greenops/kpis/measure.py",
                ["tests/kpis/test_measure.py", "tests/kpis/test_rollup.py"]),
    # accounting.py as rewritten (host terms periods, the one cost model): the fast files that
    # run it in-process (about 45 s in all; no browser test), and the survivors' file. Not
    # tests/telemetry/test_idle_minutes_rollup.py: its transactional test flushes the reused test
    # database (--reuse-db), emptying the price catalog for every later mutant's tests.
    "cost-accounting": ("greenops/costs/accounting.py",
                        ["tests/costs/test_accounting.py",
                         "tests/costs/test_workload_unpriced.py",
                         "tests/costs/test_terms_history.py", "tests/costs/test_one_model.py",
                         "tests/costs/test_history.py", "tests/costs/test_accounting_edges.py"]),
}

# What the copy needs besides the packages mutmut copies itself (source_paths).
ALSO_COPY = ["templates", "manage.py", "dashboards", "tests", "pyproject.toml", "bench"]

# Statuses that count as the tests having noticed the mutant.
DETECTED = {"killed", "timeout", "segfault", "caught by type check"}


def copy_tree(dest: Path) -> None:
    """The work tree's files (tracked and new, not ignored) into dest, replacing what changed."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
        check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src, dst = ROOT / name, dest / name
        if not src.is_file():
            continue
        if dst.exists() and dst.stat().st_mtime >= src.stat().st_mtime \
                and dst.stat().st_size == src.stat().st_size:
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


def write_config(dest: Path, target: str, tests: list[str]) -> None:
    # setup.cfg, because the copy's pyproject.toml has no [tool.mutmut] (mutmut reads that first).
    lines = ["[mutmut]",
             "source_paths =\n    greenops\n    collectors",
             f"only_mutate =\n    {target}",
             "also_copy =\n" + "\n".join(f"    {p}" for p in ALSO_COPY),
             "pytest_add_cli_args_test_selection =\n" + "\n".join(f"    {t}" for t in tests),
             # The test database survives between mutants (pytest-django), or every mutant
             # would run the migrations again.
             "pytest_add_cli_args =\n    -p\n    no:cacheprovider\n    --reuse-db",
             # Workers forked from a process that never opened a database connection: Django
             # connections do not survive a fork.
             "process_isolation = forkserver",
             "use_git_change_detection = false",
             ""]
    (dest / "setup.cfg").write_text("\n".join(lines))


def results(dest: Path, target: str) -> dict[str, list[str]]:
    """Mutant names by status, from mutmut's per-file .meta (JSON) file."""
    meta = dest / "mutants" / (target + ".meta")
    data = json.loads(meta.read_text())
    out: dict[str, list[str]] = {}
    from mutmut.stats import status_by_exit_code

    for name, code in sorted(data.get("exit_code_by_key", {}).items()):
        out.setdefault(status_by_exit_code[code], []).append(name)
    return out


def summary(name: str, target: str, by_status: dict[str, list[str]]) -> str:
    killed = sum(len(v) for k, v in by_status.items() if k in DETECTED)
    survived = len(by_status.get("survived", []))
    tried = killed + survived
    ratio = f"{killed / tried:.1%}" if tried else "n/a"
    counts = ", ".join(f"{k} {len(v)}" for k, v in sorted(by_status.items()))
    lines = [f"{name} ({target}): kill ratio {ratio} = {killed}/{tried} ({counts})"]
    for k in ("survived", "suspicious", "no tests", "not checked"):
        for m in by_status.get(k, []):
            lines.append(f"  {k}: {m}")
    return "\n".join(lines)


def run_module(name: str, env: dict) -> str:
    target, tests = MODULES[name]
    dest = SCRATCH / name
    dest.mkdir(parents=True, exist_ok=True)
    before = (results(dest, target).get("survived", [])
              if (dest / "mutants" / (target + ".meta")).exists() else [])
    copy_tree(dest)
    write_config(dest, target, tests)
    mutmut = Path(sys.executable).with_name("mutmut")
    cmd = [str(mutmut), "run", "--max-children", "1"]
    subprocess.run(cmd, cwd=dest, env=env, check=False)
    # mutmut keeps a verdict until the mutated function changes, so a survivor of an earlier
    # run would stay "survived" after a test was added for it: run those again by name (only
    # their own tests run). Tests must be added to the mapped files, not as new files: a change
    # of the test selection makes mutmut discard every verdict and start over.
    again = sorted(set(before) & set(results(dest, target).get("survived", [])))
    if again:
        subprocess.run(cmd + again, cwd=dest, env=env, check=False)
    text = summary(name, target, results(dest, target))
    (dest / "summary.txt").write_text(text + "\n")
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="module names (default: all)")
    parser.add_argument("--list", action="store_true", help="print the module map")
    args = parser.parse_args()
    if args.list:
        for name, (target, tests) in MODULES.items():
            print(f"{name:18} {target:34} {' '.join(tests)}")
        return 0
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {', '.join(unknown)}; one of {', '.join(MODULES)}")
    env = dict(os.environ)
    # A database of its own: mutants must not share the test database of a normal test run.
    base = env.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/greenops")
    env["DATABASE_URL"] = base.rstrip("/") + "_mutation"
    env.setdefault("CELERY_TASK_ALWAYS_EAGER", "true")
    reports = [run_module(m, env) for m in (args.modules or MODULES)]
    print("\n\n".join(reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
