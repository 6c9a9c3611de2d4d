"""How long `traceanalyze dashboard TRACE` takes to show the trace's first page, cold and from the cache.

    python3 bench/bench_open.py [--trace PATH] [--runs 3]

Each run starts the dashboard command as a fresh process with its own cache folder (XDG_CACHE_HOME under /tmp):
"cold" with the cache off, "cached" after one load has written the entry. Headless Chromium opens the page as soon
as the server answers; the time runs from starting the process, and from the server's first answer, until the
Overview's findings table of the trace is shown (the load, the report, the page's poll and the browser's drawing
included; from the start also the imports). Prints the median per mode.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest import CHROMIUM_FLAGS  # noqa: E402

BIG = REPO.parent / "shared" / "traces" / "h200" / "big" / "big.json.gz"
TIMEOUT_S = 180
SHOWN = "#findings"
CLI = "import sys; from traceanalyzer.cli import main; sys.exit(main())"
"""What the installed `traceanalyze` runs."""


def free_port() -> int:
    """A local TCP port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(cache: Path, cached: bool) -> dict[str, str]:
    """The process environment of one run: its own cache folder, the cache on or off."""
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    env["TRACEANALYZER_CACHE"] = "1" if cached else "0"
    return env


def warm(trace: Path, env: dict[str, str]) -> None:
    """Write the trace's cache entry (one load in its own process)."""
    code = f"import traceanalyzer as ta; ta.load({str(trace)!r})"
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


def wait_for_server(url: str, deadline: float) -> None:
    """Return once the server answers HTTP."""
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError("the dashboard did not start")


def first_page_s(trace: Path, env: dict[str, str], driver) -> tuple[float, float]:
    """Seconds from starting the dashboard process, and from the server's first answer, to its first page of the
    trace shown in the browser."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    started = time.monotonic()
    command = [sys.executable, "-c", CLI, "dashboard", str(trace), "--port", str(port)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_server(url, started + TIMEOUT_S)
        serving = time.monotonic()
        driver.get(url)
        WebDriverWait(driver, TIMEOUT_S, poll_frequency=0.02).until(
            lambda d: any(e.is_displayed() for e in d.find_elements(By.CSS_SELECTOR, SHOWN))
        )
        shown = time.monotonic()
        return shown - started, shown - serving
    finally:
        process.terminate()
        process.wait()


def browser():
    """Headless Chromium."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(), options=options)


def main() -> None:
    """Time both modes and print a Markdown table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", type=Path, default=BIG)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    driver = browser()
    results = {}
    try:
        for mode in ("cold", "cached"):
            times = []
            for _ in range(args.runs):
                with tempfile.TemporaryDirectory(prefix="ta-open-") as cache:
                    env = environment(Path(cache), mode == "cached")
                    if mode == "cached":
                        warm(args.trace, env)
                    times.append(first_page_s(args.trace, env, driver))
            results[mode] = times
    finally:
        driver.quit()
    print("| trace | mode | from process start s (median) | from server up s (median) | runs s (start / up) |")
    print("|---|---|---:|---:|---|")
    for mode, times in results.items():
        runs = " · ".join(f"{a:.2f} / {b:.2f}" for a, b in times)
        start, up = (statistics.median(t[i] for t in times) for i in (0, 1))
        print(f"| {args.trace.name} | {mode} | {start:.2f} | {up:.2f} | {runs} |")


if __name__ == "__main__":
    main()
