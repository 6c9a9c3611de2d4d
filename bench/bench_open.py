"""How long `traceanalyze dashboard TRACE` takes to show the trace's first page, cold and from the cache.

    python3 bench/bench_open.py [--trace PATH] [--runs 5] [--baseline DIR] [--new-browser]

Each run starts the dashboard command as a fresh process with its own cache folder (XDG_CACHE_HOME under /tmp):
"cold" with the cache off, "cached" after the dashboard opened the trace once (its tables and report kept).
Headless Chromium opens the page as soon as the server answers. "first page" is the browser's time from that
navigation's start until the Overview's findings table of the trace is shown (a probe in the page notes when it
first is: the rest of the load, the report, the page's poll and callbacks, the browser's drawing included); "FCP" is
the browser's first-contentful-paint of the same navigation (the page frame: its header, before any trace data);
"from start" runs from starting the process (its imports included). "server CPU s" is the server process's user +
system time (all its threads) from its start until the page was shown, and the part after it answered. Prints the
median per mode beside its target (TARGET_S), and the load average before and after.

By default one browser makes every open, so from the second on Dash's scripts come from its cache (a returning
user); ``--new-browser`` starts a browser with a fresh profile for each open (a first-time user: every script
fetched and compiled), started before the dashboard process so that its own start is outside the clock.

``--baseline DIR`` runs each open a second time on another checkout's code, in turn with this one (this, baseline,
this, ...), so that the two are measured under the same load; DIR holds the package as it is installed
(``DIR/traceanalyzer`` with its ``dashboards`` and ``parsers`` inside), put first on PYTHONPATH. Make one with
``bench/bench_open.py --layout COMMIT DIR``.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest import CHROMIUM_FLAGS  # noqa: E402

BYTECODE = Path(tempfile.gettempdir()) / "traceanalyzer-bench-bytecode"
"""Where the runs keep compiled modules (a wheel's install compiles them; a run that compiled them each time would
count 0.2-1 s that no user pays)."""
BIG = REPO.parent / "shared" / "traces" / "h200" / "big" / "big.json.gz"
TIMEOUT_S = 180
SHOWN = "#findings"
CLI = "import sys; from traceanalyzer.cli import main; sys.exit(main())"
"""What the installed `traceanalyze` runs."""
WARM = "import sys; from traceanalyzer.dashboards.store import Store; Store().open(sys.argv[1:], wait=True)"
"""One open of the trace by the dashboard's store (the tables and, where the code keeps it, the report cached)."""
TARGET_S = {"cold": 2.0, "cached": 1.0}
"""Issue #31's targets for the first page, median of 5 on a quiet machine."""
SUBPACKAGES = ("dashboards", "parsers")
"""Top-level folders of the checkout installed inside the package (pyproject's package-dir)."""

# Notes (performance.now(), ms from the navigation's start) when the first page's findings table is first shown.
PROBE = """
new MutationObserver((records, observer) => {
  const shown = document.querySelector('SHOWN');
  if (shown && shown.checkVisibility({visibilityProperty: true})) {
    window.__shown = performance.now();
    observer.disconnect();
  }
}).observe(document, {subtree: true, childList: true, attributes: true});
""".replace("SHOWN", SHOWN)
READ = """
const paint = performance.getEntriesByName('first-contentful-paint')[0];
return [window.__shown || null, paint ? paint.startTime : null];
"""


class Open(NamedTuple):
    """One timed open."""

    page_s: float  # browser: the navigation's start to the findings shown
    fcp_s: float  # browser: the navigation's start to its first contentful paint
    start_s: float  # from starting the process to the findings shown (as seen by this script)
    cpu_s: float  # server process CPU (user + system) until the findings were shown
    cpu_up_s: float  # the part of it after the server first answered


def free_port() -> int:
    """A local TCP port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(cache: Path, cached: bool, code: Path | None) -> dict[str, str]:
    """The process environment of one run: its own cache folder, the cache on or off, the code (None: this
    checkout's, as installed), and compiled modules kept (under BYTECODE) as an installed package has them, even
    where the environment says ``PYTHONDONTWRITEBYTECODE``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env |= {"XDG_CACHE_HOME": str(cache), "PYTHONPYCACHEPREFIX": str(BYTECODE)}
    env["TRACEANALYZER_CACHE"] = "1" if cached else "0"
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(code), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a running process, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for_server(url: str, deadline: float) -> None:
    """Return once the server answers HTTP."""
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError("the dashboard did not start")


def first_page(trace: Path, env: dict[str, str], driver) -> Open:
    """Open the dashboard on trace in a fresh process and time its first page of the trace in the browser."""
    from selenium.webdriver.support.ui import WebDriverWait

    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    started = time.monotonic()
    command = [sys.executable, "-c", CLI, "dashboard", str(trace), "--port", str(port)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_server(url, started + TIMEOUT_S)
        up_cpu = cpu_s(process.pid)
        driver.get(url)
        shown, paint = WebDriverWait(driver, TIMEOUT_S, poll_frequency=0.02).until(
            lambda d: (lambda r: r if r[0] is not None else False)(d.execute_script(READ))
        )
        end = time.monotonic()
        used = cpu_s(process.pid)
        return Open(shown / 1000, (paint or 0) / 1000, end - started, used, used - up_cpu)
    finally:
        process.terminate()
        process.wait()


def browser():
    """Headless Chromium with the probe installed in every page."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(), options=options)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": PROBE})
    return driver


def layout(commit: str, into: Path) -> None:
    """Write a commit's package as it is installed (``into/traceanalyzer``, its subpackages inside) for
    --baseline."""
    data = subprocess.run(["git", "-C", str(REPO), "archive", commit], check=True, capture_output=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(tmp, filter="data")
        package = into / "traceanalyzer"
        shutil.copytree(Path(tmp) / "traceanalyzer", package)
        for sub in SUBPACKAGES:
            shutil.copytree(Path(tmp) / sub, package / sub)


def one_open(trace: Path, mode: str, code: Path | None, driver) -> Open:
    """One timed open in a fresh cache folder (for "cached", written by one open first), in driver's browser or,
    where driver is None, in a new one (a fresh profile) quit afterwards."""
    with tempfile.TemporaryDirectory(prefix="ta-open-") as cache:
        env = environment(Path(cache), mode == "cached", code)
        if mode == "cached":
            subprocess.run([sys.executable, "-c", WARM, str(trace)], env=env, check=True)
        if driver is not None:
            return first_page(trace, env, driver)
        fresh = browser()
        try:
            return first_page(trace, env, fresh)
        finally:
            fresh.quit()


def load_average() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def target(median_s: float, target_s: float) -> str:
    """A target beside a median: ``≤ 1 s: met`` or ``not met``."""
    return f"≤ {target_s:g} s: {'met' if median_s <= target_s else 'not met'}"


def main() -> None:
    """Time both modes (and the baseline's, in turn) and print a Markdown table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", type=Path, default=BIG)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--baseline", type=Path, metavar="DIR", help="another checkout's package, timed in turn")
    p.add_argument("--layout", nargs=2, metavar=("COMMIT", "DIR"), help="write COMMIT's package to DIR and exit")
    p.add_argument("--new-browser", action="store_true", help="a browser with a fresh profile for each open")
    args = p.parse_args()
    if args.layout:
        layout(args.layout[0], Path(args.layout[1]))
        return
    codes = {"this": None, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    print(f"load average before: {load_average()}", file=sys.stderr)
    driver = None if args.new_browser else browser()
    results: dict[tuple[str, str], list[Open]] = {}
    try:
        for mode in ("cold", "cached"):
            for _ in range(args.runs):
                for name, code in codes.items():
                    results.setdefault((name, mode), []).append(one_open(args.trace, mode, code, driver))
    finally:
        if driver is not None:
            driver.quit()
    print(f"load average after: {load_average()}", file=sys.stderr)
    print(
        "| code | mode | browser | first page s (median) | target s | FCP s | from process start s "
        "| server CPU s (after it answered) | first page runs s |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    kind = "new per open" if args.new_browser else "one for all opens"
    for (name, mode), opens in results.items():
        med = {f: statistics.median(getattr(o, f) for o in opens) for f in Open._fields}
        runs = " · ".join(f"{o.page_s:.2f}" for o in opens)
        print(
            f"| {name} | {mode} | {kind} | {med['page_s']:.2f} | {target(med['page_s'], TARGET_S[mode])} "
            f"| {med['fcp_s']:.2f} | {med['start_s']:.2f} | {med['cpu_s']:.2f} ({med['cpu_up_s']:.2f}) | {runs} |"
        )
    if args.baseline:
        for mode in ("cold", "cached"):
            pairs = zip(results[("this", mode)], results[("baseline", mode)], strict=True)
            ratio = statistics.median(a.page_s / b.page_s for a, b in pairs)
            print(f"\n{mode}: first page this ÷ baseline, median of the paired runs: {ratio:.2f}")


if __name__ == "__main__":
    main()
