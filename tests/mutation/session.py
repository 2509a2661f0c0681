"""Every mutant of a module against its whole test map, in ONE pytest session (fixtures kept).

    python tests/mutation/session.py cost-accounting             # untested mutants + survivors
    python tests/mutation/session.py wire --all                  # every mutant again
    python tests/mutation/session.py wire 'greenops.telemetry.wire.x_parse_batch__mutmut_*'
    python tests/mutation/session.py cost-accounting --generate  # only make the mutants

`run.py` has mutmut run a pytest session per mutant: Django setup, the --reuse-db test database
check, imports and collection cost 10-50 s each on a shared 2-core machine, hours for a module
of 800 mutants. This runner uses the same scratch copy (var/mutation/<name>/, same config as
run.py) and mutmut's own mutants, but one session:

1. It generates the mutants with mutmut's own code (`mutmut run`'s generation step; an
   unchanged function keeps its verdicts, as under mutmut), then starts pytest once inside
   mutants/ over the module's mapped test files (`run.py`'s MODULES), Django and the reused
   test database set up once.
2. Clean run: every item once, normally, with MUTANT_UNDER_TEST=stats, so mutmut's trampolines
   record which mutated functions each test calls (written to mutants/mutmut-stats.json in
   mutmut's format). Every item must pass.
3. For each mutant: MUTANT_UNDER_TEST=<name> (the switch mutmut's trampolines read on every
   call) and the items that call its function, fastest first, rerun with
   `_pytest.runner.runtestprotocol(item, log=False, nextitem=...)`. The next item is the next
   test of that mutant, so session-scoped fixtures (django_db_setup) survive; after a mutant's
   last test, everything below the session is torn down (a module fixture broken by a mutant
   does not leak into the next one). Killed at the first failed report (setup, call or
   teardown), like mutmut's `pytest -x`; a test over its limit (CPU --cpu-limit s, wall
   --wall-limit s: the lead may SIGSTOP us) counts as a timeout, and memory is capped (an
   endless loop filling a set raises MemoryError: killed).
4. Verdicts go into mutants/<target>.meta with mutmut's exit codes (1 killed, 0 survived, 36
   timeout, 33 no tests), so `run.py`'s summary and `mutmut results` agree; the summary is
   printed and written to var/mutation/<name>/summary.txt.

A transactional test (transaction=True) empties the test database at its end; tests/conftest.py
(`reset_to_migrated`) puts back every row the migrations left, the bundled price catalog with
its price periods included. The runner still checks after each such test that the catalog has
the row counts it had before the first (and reloads the snapshots if it finds none, as an older
conftest did), and stops if a later test leaves other counts.

Validated (issue 16): on cost-accounting the verdicts of mutmut itself, run by name, for a
killed and two surviving mutants were the same (on wire too: `parse_batch` 66 killed, 67 and
`distinct_timestamps` 4 survived); SURVIVORS.md's known verdicts (`cost_of` 59,
110 killed; 8, `workload_cost` 3 equivalent) came out the same; a bug planted by hand into a
surviving mutant's body (reserved hosts not committed) was killed; on wire, an endless loop
planted the same way was a timeout (30 s CPU) and a loop allocating without bound was killed
(MemoryError at the cap), the session going on. `mutmut results` in the scratch copies lists
exactly the survivors of this runner.

What differs from mutmut: module state a mutant leaves behind (a module-level cache filled
under a mutant) would outlive it here, and state the clean run filled could hide a mutant of the
code that fills it; the database connection, which such state hangs on in this project (store's
temp stage tables), is closed after every mutant, so each mutant's tests open a fresh one as in
mutmut's session per mutant. The mapped files of cost-accounting and wire have no other such
state that a mutated function fills. A mutant whose verdict looks doubtful can be rerun by
mutmut itself, by name (`run.py`'s docstring).
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import resource
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "mutation"))
from run import MODULES, SCRATCH, copy_tree, results, summary, write_config  # noqa: E402

KILLED, SURVIVED, NO_TESTS, TIMEOUT = 1, 0, 33, 36


class MutantTimeout(Exception):
    """Raised in the test by the CPU or wall-clock timer."""


_fired: list[str] = []  # the timers that fired during the current test


def _timeout(signum, _frame):
    _fired.append(signal.Signals(signum).name)
    raise MutantTimeout(_fired[-1])


def generate(dest: Path) -> None:
    """mutmut's generation step (`mutmut run` up to its stats), in dest."""
    os.chdir(dest)
    import mutmut.__main__ as mm
    from mutmut.mutation.trampoline import set_mutant_under_test

    set_mutant_under_test("mutant_generation")
    os.makedirs("mutants", exist_ok=True)
    mm.copy_src_dir()
    mm.copy_also_copy_files()
    mm.setup_source_paths()
    mm.create_mutants(1)


class SessionRunner:
    """The pytest plugin: the clean run, then each mutant's covering items."""

    def __init__(self, dest: Path, target: str, names: list[str] | None, retest_all: bool,
                 cpu_limit: float, wall_limit: float) -> None:
        from mutmut.mutation.data import SourceFileMutationData

        self.dest = dest
        self.data = SourceFileMutationData(path=target)
        self.data.meta_path = dest / "mutants" / (target + ".meta")  # pytest runs in mutants/
        self.data.load()
        self.module = target[:-3].replace("/", ".")
        self.names, self.retest_all = names, retest_all
        self.cpu_limit, self.wall_limit = cpu_limit, wall_limit
        self.failed_clean: list[str] = []

    # -- pytest hooks --------------------------------------------------------------------------
    def pytest_runtestloop(self, session):
        from _pytest.runner import runtestprotocol

        if session.testsfailed and not session.config.option.continue_on_collection_errors:
            raise session.Interrupted(f"{session.testsfailed} errors during collection")
        if session.config.option.collectonly:
            return True
        self.session, self.runtestprotocol = session, runtestprotocol
        mutated = sys.modules.get(self.module)
        if mutated is None or "/mutants/" not in mutated.__file__:
            _abort(f"{self.module} not imported from mutants/: {mutated}")
        items = session.items
        self.seeded: dict[str, int] | None = None  # the catalog as the first repair left it
        self.migrated: dict[str, int] | None = None  # ... as found before the first flush
        hits, durations = self.clean_run(items)
        if self.failed_clean:
            _abort("clean run failed: " + ", ".join(self.failed_clean))
        self.save_stats(items, hits, durations)
        self.forced_fail(items, hits)
        try:
            self.mutants(items, hits, durations)
        finally:
            session._setupstate.teardown_exact(None)
        return True

    # -- the runs --------------------------------------------------------------------------------
    def clean_run(self, items):
        from mutmut.mutation.trampoline import set_mutant_under_test
        from mutmut.state import state

        set_mutant_under_test("stats")
        os.environ["MUTMUT_DEPENDENCY_DEPTH"] = "-1"
        hits: dict[str, set[str]] = {}
        durations: dict[str, float] = {}
        for i, item in enumerate(items):
            nextitem = items[i + 1] if i + 1 < len(items) else _SessionOnly(self.session)
            state()._stats.clear()
            if self.migrated is None and flushes_database(item) and _test_database_set_up():
                self.migrated = self.seeded_counts(self.session)
            t0 = time.perf_counter()
            reports = self.runtestprotocol(item, log=True, nextitem=nextitem)
            durations[item.nodeid] = time.perf_counter() - t0
            self.repair_after(item)
            if any(r.failed for r in reports):
                self.failed_clean.append(item.nodeid)
            for function in state()._stats:
                hits.setdefault(function, set()).add(item.nodeid)
            state()._stats.clear()
        set_mutant_under_test("")
        return hits, durations

    def forced_fail(self, items, hits) -> None:
        """mutmut's own setup check: under MUTANT_UNDER_TEST=fail every trampoline raises, so a
        test that calls a mutated function must fail -- else the switch does not reach it."""
        from mutmut.mutation.trampoline import set_mutant_under_test

        covering = {t for tests in hits.values() for t in tests}
        item = next((i for i in items if i.nodeid in covering), None)
        if item is None:
            return
        set_mutant_under_test("fail")
        try:
            reports = self.runtestprotocol(item, log=False, nextitem=_SessionOnly(self.session))
        finally:
            set_mutant_under_test("")
        if not any(r.failed for r in reports):
            _abort(f"{item.nodeid} passed with every mutated function "
                                      "raising: the mutant switch does not reach the tests")

    def chosen(self) -> list[str]:
        keys = sorted(self.data.exit_code_by_key)
        if self.names:
            return [k for k in keys if any(k == n or fnmatch.fnmatch(k, n) for n in self.names)]
        if self.retest_all:
            return keys
        # Like run.py: what has no verdict, and the survivors again (a test added since counts).
        return [k for k in keys if self.data.exit_code_by_key[k] in (None, SURVIVED, NO_TESTS)]

    def mutants(self, items, hits, durations) -> None:
        from mutmut.mutation.trampoline import set_mutant_under_test
        from mutmut.utils.format_utils import mangled_name_from_mutant_name

        by_id = {item.nodeid: item for item in items}
        chosen = self.chosen()
        print(f"\n{len(chosen)} mutants of {self.module} to test", flush=True)
        # No tracebacks for the mutants' failures: only the verdict is kept, and formatting one
        # (pytest parses the mutated module's source) needs memory a mutant may have used up.
        self.session.config.option.tbstyle = "no"
        old_prof = signal.signal(signal.SIGPROF, _timeout)
        old_alrm = signal.signal(signal.SIGALRM, _timeout)
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (_vm_size() + 3 * 2**30, hard))
        counts: dict[int, int] = {}
        t_start = time.monotonic()
        try:
            for n, name in enumerate(chosen, 1):
                tests = sorted(hits.get(mangled_name_from_mutant_name(name), ()),
                               key=lambda t: durations[t])
                t0 = time.monotonic()
                if not tests:
                    code, why = NO_TESTS, ""
                else:
                    set_mutant_under_test(name)
                    try:
                        code, why = self.run_mutant([by_id[t] for t in tests])
                    finally:
                        set_mutant_under_test("")
                        # A fresh database connection per mutant, as in mutmut's session per
                        # mutant: per-connection state (store's temp stage tables, remembered
                        # in _staged_connections) must not let the clean run's set-up hide a
                        # mutant of the code that sets it up.
                        from django.db import connections
                        connections.close_all()
                self.data.exit_code_by_key[name] = code
                self.data.durations_by_key[name] = time.monotonic() - t0
                self.data.estimated_time_of_tests_by_mutant[name] = sum(
                    durations[t] for t in tests)
                self.data.save()
                counts[code] = counts.get(code, 0) + 1
                verdict = {KILLED: "killed", SURVIVED: "SURVIVED", NO_TESTS: "no tests",
                           TIMEOUT: "timeout"}[code]
                print(f"[{n}/{len(chosen)} {time.monotonic() - t_start:.0f}s] {verdict}: "
                      f"{name} {why}", flush=True)
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
            signal.signal(signal.SIGPROF, old_prof)
            signal.signal(signal.SIGALRM, old_alrm)

    def run_mutant(self, items) -> tuple[int, str]:
        """(exit code, the failing test): the items in turn until one fails."""
        for i, item in enumerate(items):
            nextitem = items[i + 1] if i + 1 < len(items) else _SessionOnly(self.session)
            _fired.clear()
            signal.setitimer(signal.ITIMER_PROF, self.cpu_limit)
            signal.setitimer(signal.ITIMER_REAL, self.wall_limit)
            try:
                reports = self.runtestprotocol(item, log=False, nextitem=nextitem)
                when = next((r.when for r in reports if r.failed), None)
            except (MemoryError, MutantTimeout) as exc:
                # Out of memory or time inside pytest itself (building the failure's report
                # while the mutant's garbage is still referenced): the mutant broke the test.
                when = f"pytest: {type(exc).__name__}"
                self.teardown_to_session()
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
                signal.setitimer(signal.ITIMER_REAL, 0)
            self.repair_after(item)
            if when is not None:
                if i + 1 < len(items):
                    self.teardown_to_session()
                code = TIMEOUT if _fired else KILLED
                return code, f"({item.nodeid}, {when}{', ' + _fired[0] if _fired else ''})"
        return SURVIVED, ""

    def teardown_to_session(self) -> None:
        self.session._setupstate.teardown_exact(_SessionOnly(self.session))

    def repair_after(self, item) -> None:
        """Give the price catalog back after a transactional test flushed the database."""
        if not flushes_database(item):
            return
        from pytest_django.plugin import blocking_manager_key

        from greenops.costs import catalog
        from greenops.costs.models import Price

        with item.config.stash[blocking_manager_key].unblock():
            if not Price.objects.exists():
                catalog.load_snapshots()
        counts = self.seeded_counts(self.session)
        if self.seeded is None:
            # load_snapshots records a price period per snapshot change, the migrations one per
            # price (0002/0003 load before 0008 adds periods): the conftest's repair, and the
            # state every later test of a normal run or of mutmut's sessions meets too.
            self.seeded = counts
            if self.migrated is not None and counts != self.migrated:
                print(f"\nsession.py: the catalog after a flush holds {counts}, as migrated "
                      f"{self.migrated}", flush=True)
        elif counts != self.seeded:
            _abort(f"after {item.nodeid} the catalog holds {counts}, not {self.seeded}")

    @staticmethod
    def seeded_counts(session) -> dict[str, int]:
        """Rows of the tables the data migrations fill (the price catalog, its periods)."""
        from pytest_django.plugin import blocking_manager_key

        from greenops.costs.models import InstanceType, Price, PricePeriod

        with session.config.stash[blocking_manager_key].unblock():
            return {m.__name__: m.objects.count() for m in (InstanceType, Price, PricePeriod)}

    def save_stats(self, items, hits, durations) -> None:
        """mutants/mutmut-stats.json in mutmut's own format, so `mutmut results` / a later
        `mutmut run` see the same test map."""
        from mutmut.configuration import config
        from mutmut.state import state
        from mutmut.stats import save_stats

        st = state()
        for function, tests in hits.items():
            st.tests_by_mangled_function_name[function] = set(tests)
        st.duration_by_test.update(durations)
        st.stats_time = sum(durations.values())
        st.current_function_hashes.update(
            {f"{self.module}.{f}": h for f, h in self.data.hash_by_function_name.items()})
        os.chdir(self.dest)
        try:
            if not st.watched_file_hashes:
                from mutmut.__main__ import compute_watched_file_hashes
                st.watched_file_hashes = compute_watched_file_hashes()
            config()
            save_stats()
        finally:
            os.chdir(self.dest / "mutants")


class _SessionOnly:
    """A `nextitem` whose chain is the session alone: teardown stops at session scope."""

    def __init__(self, session) -> None:
        self.session = session

    def listchain(self):
        return [self.session]


def _abort(message: str) -> None:
    """Stop the session, saying why (a Failed raised here would end it silently)."""
    import pytest

    print(f"\nsession.py: {message}", file=sys.stderr, flush=True)
    pytest.exit(message, returncode=3)


def flushes_database(item) -> bool:
    """tests/conftest.py's rule (the scratch copy's, imported once pytest runs in mutants/)."""
    from tests.conftest import flushes_database as rule

    return rule(item)


def _test_database_set_up() -> bool:
    from django.db import connection

    return connection.settings_dict["NAME"].startswith("test_")


def _vm_size() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module", choices=sorted(MODULES))
    parser.add_argument("mutants", nargs="*", help="names or globs (default: untested + survivors)")
    parser.add_argument("--all", action="store_true", help="retest every mutant")
    parser.add_argument("--generate", action="store_true", help="only generate the mutants")
    parser.add_argument("--cpu-limit", type=float, default=30.0, help="CPU seconds per test")
    parser.add_argument("--wall-limit", type=float, default=300.0, help="wall seconds per test")
    args = parser.parse_args()
    target, tests = MODULES[args.module]
    dest = SCRATCH / args.module
    dest.mkdir(parents=True, exist_ok=True)
    copy_tree(dest)
    write_config(dest, target, tests)
    # As run.py: a database of its own, tasks in-process.
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/greenops")
    if not base.endswith("_mutation"):
        os.environ["DATABASE_URL"] = base.rstrip("/") + "_mutation"
    os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "true")
    generate(dest)
    if args.generate:
        return 0
    import pytest
    from mutmut.configuration import config

    config()  # read from dest's setup.cfg before pytest runs in mutants/
    plugin = SessionRunner(dest, target, args.mutants, args.all, args.cpu_limit,
                           args.wall_limit)
    os.chdir(dest / "mutants")
    sys.path.insert(0, str(dest / "mutants"))
    code = pytest.main(["--rootdir=.", "--tb=short", "-q", "-p", "no:randomly",
                        "-p", "no:cacheprovider", "--reuse-db", *tests], plugins=[plugin])
    os.chdir(dest)
    text = summary(args.module, target, results(dest, target))
    (dest / "summary.txt").write_text(text + "\n")
    print(text)
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
