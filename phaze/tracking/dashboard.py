"""The MLflow UI served on a study's store and driven in headless Chromium as a user would (Debian packages `chromium`,
`chromium-driver`): `mlflow ui` on a free port, the browser, and the experiment page's controls. tests/test_dashboard.py
checks the UI through it; experiments/figures/dashboard_screenshots.py takes docs/dashboard.md's screenshots with it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager, suppress
from pathlib import Path

from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver import ActionChains
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from phaze.tracking.params import CLASSIC_VIEW

TINY_MODEL = [
    "model=gpt2", "model.num_layers=2", "model.hidden_size=256", "model.num_heads=4", "model.num_kv_heads=4",
    "model.ffn_hidden_size=1024", "model.seq_len=128", "model.max_position_embeddings=128", "model.vocab_size=1000",
    "model.max_tp=2", "train.mbs=[1,2]", "train.tp_widths=[1,2]", "train.global_batch=64", "cluster.devices=16",
]
"""A two-layer GPT-2 on 16 devices (tests/test_search_study.py's tiny model): studies of seconds, for the UI's checks
and screenshots."""
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# Headless and offline: the machines have no network beyond loopback, so every background fetch is off.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
# Wide enough for the run name, a few metric and several hw.* columns side by side, and small PNGs.
WINDOW = (1600, 1000)
# `mlflow ui` imports mlflow, migrates the SQLite schema and spawns uvicorn: ~5 s idle, far longer on 2 busy cores.
SERVER_START_S = 90
# The React app downloads its bundle, then fetches runs: a few seconds; generous for a loaded machine.
UI_WAIT_S = 45
# How often the server's /health is polled while it starts.
POLL_S = 0.5
# A terminated server's process group gets this long to exit before it is killed.
STOP_S = 10
# One worker is plenty for one browser; each extra uvicorn worker costs a CPU-bound start.
SERVER_WORKERS = "1"
# The server's background job runner (seven huey consumers, for GenAI evaluation jobs) is not needed to browse runs.
SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
# A virtualised dropdown renders ~10 options; scroll it by about half its height, at most OPTION_SCROLLS times.
OPTION_SCROLL_PX = 150
OPTION_SCROLLS = 40

THROUGHPUT_COLUMN = "metrics.`throughput_seq_s`"
# The default metric column cuts "throughput_seq_s" short; this much wider shows the whole name.
THROUGHPUT_WIDEN_PX = 40
# MLflow's default sort (newest first), which nests child runs under their parent.
DEFAULT_ORDER = "attributes.start_time"
# Attribute columns shown by default that a phaze study leaves empty.
EMPTY_COLUMNS = ["Dataset", "Source", "Models"]
def run_cli_studies(studies: dict[str, list[str]], uri: str, workdir: Path) -> dict[str, str]:
    """`python -m phaze.run` once per entry, all at once (one process each, in workdir/<key> with its own cache and
    study storage), logged to the same MLflow store `uri`; returns each run's standard output by key."""
    procs = {}
    for key, overrides in studies.items():
        folder = workdir / key
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "stdout.log", "w") as out, open(folder / "stderr.log", "w") as err:
            procs[key] = subprocess.Popen([sys.executable, "-m", "phaze.run", *overrides, f"tracking.uri={uri}", f"cache_dir={folder / 'cache'}",
                                           f"schedule.cache_dir={folder / 'cache' / 'schedule'}",
                                           f"search.storage=sqlite:///{folder / 'studies.db'}"], stdout=out, stderr=err, cwd=folder)
    for key, proc in procs.items():
        if proc.wait():
            raise RuntimeError(f"phaze.run {key} failed: {(workdir / key / 'stderr.log').read_text()[-2000:]}")
    return {key: (workdir / key / "stdout.log").read_text() for key in studies}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_health(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    """Poll `url`/health until it answers OK; raise if the server exits or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow ui exited with {proc.returncode} before answering")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=POLL_S * 4) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(POLL_S)
    raise TimeoutError(f"mlflow ui did not answer {url}/health within {timeout_s} s")


@contextmanager
def mlflow_ui(uri: str, log_path: Path):
    """`mlflow ui` on a free 127.0.0.1 port against the store `uri`; yields its base URL, stops its process group after."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", "127.0.0.1", "--port", str(port),
               "--workers", SERVER_WORKERS]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **SERVER_ENV})
        try:
            wait_for_health(url, proc, SERVER_START_S)
            yield url
        finally:
            stop_group(proc)


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group `proc` leads (the server and its uvicorn workers), then SIGKILL what is left of it."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=STOP_S)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=STOP_S)


@contextmanager
def chromium(profile_dir: Path):
    """Headless Chromium driven by Selenium through the Debian chromedriver, with a fresh profile."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={profile_dir}", f"--window-size={WINDOW[0]},{WINDOW[1]}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(UI_WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


class Dashboard:
    """The MLflow experiment page, operated through its controls as a user would."""

    def __init__(self, driver, base_url: str):
        self.driver = driver
        self.base_url = base_url
        self.wait = WebDriverWait(driver, UI_WAIT_S)

    def find(self, xpath: str):
        """The first visible element at `xpath`, waiting up to UI_WAIT_S for it."""
        return self.wait.until(lambda d: next((e for e in d.find_elements(By.XPATH, xpath) if e.is_displayed()), False))

    def click(self, xpath: str) -> None:
        """Click the element at `xpath` once it is visible, centred first so sticky headers do not cover it."""
        element = self.find(xpath)
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
        element.click()

    def open_runs(self, experiment_id: str, chart: bool = False, order_by: str | None = None) -> None:
        """The experiment's runs page in the classic view (table or chart, optionally sorted by a metric, descending),
        assistant closed."""
        mode = "CHART" if chart else "TABLE"
        order_key = f"metrics.%60{order_by}%60" if order_by else DEFAULT_ORDER
        self.open(f"{self.base_url}/#/experiments/{experiment_id}/runs?{CLASSIC_VIEW}&compareRunsMode={mode}&orderByKey={order_key}&orderByAsc=false")

    def open(self, url: str) -> None:
        """An experiment page at `url`, once its runs are listed, assistant closed."""
        self.driver.get(url)
        self.find("//*[@role='gridcell']//a[contains(@href, '/runs/')]")
        self.close_assistant()

    def close_assistant(self) -> None:
        """Close the MLflow Assistant panel, which opens by itself on a browser's first visit."""
        for close in self.driver.find_elements(By.XPATH, "//button[@aria-label='Close'][not(ancestor::*[@role='dialog'])]"):
            if close.is_displayed():
                close.click()

    def sidebar_items(self) -> list[str]:
        """The labels of the experiment's navigation links in the sidebar (which tell the classic view from GenAI's)."""
        return [e.text.strip() for e in self.driver.find_elements(By.XPATH, "//aside//a | //nav//a") if e.is_displayed() and e.text.strip()]

    def filter_runs(self, expression: str) -> None:
        """Type a search filter into the runs page's search box and press Enter, as a user would; waits until the page
        has taken it (its URL carries it)."""
        box = self.find("//input[contains(@placeholder, 'metrics.rmse')]")
        box.send_keys(Keys.CONTROL, "a")  # the modifier is held to the end of one send_keys call: select, then type
        box.send_keys(Keys.BACK_SPACE, expression)
        self.wait.until(lambda d: box.get_attribute("value") == expression)
        box.send_keys(Keys.ENTER)
        self.wait.until(lambda d: f"searchFilter={urllib.parse.quote_plus(expression)}&" in d.current_url)

    def matching_runs(self, expected: int) -> int:
        """The number of runs the page says match, once it says `expected` (or the wait runs out). Nested runs count
        their parent too: a sort on a metric lists the matching runs flat."""
        counter = "//*[contains(., 'matching runs')][not(*[contains(., 'matching runs')])]"
        try:
            self.wait.until(lambda d: self.find(counter).text.split()[0] == str(expected))
        except TimeoutException:
            pass
        return int(self.find(counter).text.split()[0])

    def sort_by(self, metric: str, descending: bool = True) -> None:
        """Sort the runs by `metric` through the Sort menu (searching it by name), descending or ascending."""
        direction = f"//button[@data-testid='sort-select-{'desc' if descending else 'asc'}']"
        self.click("//button[contains(., 'Sort:')]")
        self.click(direction)
        if not any(e.is_displayed() for e in self.driver.find_elements(By.XPATH, direction)):  # the menu closed: open it again
            self.click("//button[contains(., 'Sort:')]")
        self.find("//input[@type='search'][@placeholder='Search']").send_keys(metric)
        self.click(f"//*[@data-testid='sort-select-{metric}']")  # closes the menu
        self.wait.until(lambda d: f"orderByKey={urllib.parse.quote_plus(f'metrics.`{metric}`')}&orderByAsc={str(not descending).lower()}"
                        in d.current_url)

    def listed_runs(self) -> list[str]:
        """The run ids of the table's rows, top to bottom (the grid renders each row once per pinned section)."""
        rows = {e.get_attribute("row-id"): int(e.get_attribute("row-index")) for e in self.driver.find_elements(By.XPATH, "//div[@role='row'][@row-id]")}
        return sorted(rows, key=rows.get)

    def compare(self, run_ids: list[str]) -> None:
        """Tick the runs' checkboxes and press Compare; waits for the comparison page."""
        for run_id in run_ids:
            self.click(f"//div[@role='row'][@row-id='{run_id}']//*[contains(@class, 'ag-checkbox-input-wrapper')]")
        self.click("//button[normalize-space(.)='Compare']")
        self.wait.until(lambda d: "/compare-runs?" in d.current_url)
        self.find("//button[@aria-label='Parameters - Show diff only']")

    def compared_params(self, diff_only: bool = True) -> tuple[list[str], dict[str, list[str]]]:
        """On the comparison page: (the runs' ids in column order, each param's values in that order), with the
        Parameters section's "Show diff only" switched on (only params whose values differ) or off."""
        switch = self.find("//button[@aria-label='Parameters - Show diff only']")
        if (switch.get_attribute("aria-checked") == "true") != diff_only:
            switch.click()
            self.wait.until(lambda d: (switch.get_attribute("aria-checked") == "true") == diff_only)
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", switch)  # the params table in view
        ids = [e.text.strip() for e in self.driver.find_elements(By.XPATH, "//tr[th[normalize-space(.)='Run ID:']]/th[a]")]
        table = switch.find_element(By.XPATH, "./ancestor::*[contains(@class, 'collapse-content-box')]//table")
        params = {row.find_element(By.TAG_NAME, "th").text.strip(): [td.text.strip() for td in row.find_elements(By.TAG_NAME, "td")]
                  for row in table.find_elements(By.TAG_NAME, "tr")}
        return ids, params

    def collapse_sidebar(self) -> None:
        """Hide the navigation sidebar to give the table its width."""
        self.click("//button[@aria-label='Toggle sidebar']")

    def expand(self, parent_run_id: str) -> None:
        """Open the parent run's group so its child (trial) runs are listed."""
        self.click(f"//a[contains(@href, '{parent_run_id}')]/ancestor::div[@role='gridcell']//button")

    def toggle_columns(self, names: list[str]) -> None:
        """Tick or untick columns in the Columns menu, searching each by name."""
        self.click("//button[@data-testid='column-selection-dropdown'][contains(., 'Columns')]")
        box = self.find("//input[@placeholder='Search columns']")
        for name in names:
            box.send_keys(Keys.CONTROL + "a", name)
            self.click(f"//*[@data-testid='column-selector-tree']//span[@title][normalize-space(.)='{name}']")
        box.send_keys(Keys.ESCAPE)

    def widen_column(self, col_id: str, px: int) -> None:
        """Drag the right edge of the column header `col_id` by `px` pixels."""
        handle = self.find(f"//*[@role='columnheader'][@col-id='{col_id}']//*[contains(@class, 'ag-header-cell-resize')]")
        ActionChains(self.driver).click_and_hold(handle).move_by_offset(px, 0).release().perform()

    def show_all_runs(self) -> None:
        """Make every run visible in the charts (MLflow shows the first 10 by default)."""
        self.click("//button[@data-testid='experiment-view-runs-visibility-column-header']")
        self.click("//*[@role='menuitemradio'][normalize-space(.)='Show all runs']")

    def add_chart(self, kind: str, fields: dict[str, list[str]]) -> None:
        """Add a chart of `kind` (parallel, scatter, ...) choosing options per field ('Params', 'X axis', ...)."""
        self.click("(//button[@data-testid='experiment-view-compare-runs-add-chart'])[1]")
        self.click(f"//*[@data-testid='experiment-view-compare-runs-chart-type-{kind}']")
        for field, options in fields.items():
            for option in options:
                self.choose(field, option)
            self.click("//h2[normalize-space(.)='Add new chart']")  # closes the dropdown
            self.wait.until(lambda d: self.open_list() is None)
        self.click("//button[@data-testid='experiment-view-compare-runs-chart-modal-confirm']")

    def choose(self, field: str, option: str) -> None:
        """Pick `option` in the chart dialog's `field` dropdown, scrolling its virtual list as needed."""
        field_xpath = f"//*[@data-testid='experiment-view-compare-runs-config-field'][h4[normalize-space(.)='{field}']]"
        combobox = self.wait.until(lambda d: next(iter(d.find_elements(By.XPATH, f"{field_xpath}//input[@role='combobox']")), False))
        if combobox.get_attribute("aria-expanded") != "true":  # the input is transparent: present, never "displayed"
            selector = self.find(f"{field_xpath}//*[contains(@class, 'select-selector')]")
            self.driver.execute_script("arguments[0].dispatchEvent(new MouseEvent('mousedown', {bubbles: true}))", selector)
            self.wait.until(lambda d: self.open_list())
        self.driver.execute_script("arguments[0].scrollTop = 0", self.open_list())  # the list stays where the last pick left it
        for _ in range(OPTION_SCROLLS):
            matches = [e for e in self.driver.find_elements(By.CSS_SELECTOR, f"[class*=select-item-option][title='{option}']") if e.is_displayed()]
            if matches:
                matches[0].click()
                return
            holder = self.open_list()
            if holder:
                self.driver.execute_script("arguments[0].scrollTop += arguments[1]", holder, OPTION_SCROLL_PX)
        raise TimeoutException(f"option {option!r} not found in {field!r}")

    def open_list(self):
        """The open dropdown's scrollable option list, or None."""
        return next((e for e in self.driver.find_elements(By.CSS_SELECTOR, ".rc-virtual-list-holder") if e.is_displayed()), None)

    def card(self, title: str):
        """The chart card titled `title`, scrolled into view (cards render lazily)."""
        area = self.find("//*[@data-testid='experiment-view-compare-runs-chart-area']")
        xpath = f"//*[@data-testid='experiment-view-compare-runs-card'][.//h4[@title='{title}']]"

        def scrolled_to(driver):
            found = driver.find_elements(By.XPATH, xpath)
            if found:
                return found[-1]
            driver.execute_script("arguments[0].scrollTop += arguments[0].clientHeight / 2", area)
            return False

        card = self.wait.until(scrolled_to)
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", card)
        return card

    def fullscreen(self, title: str):
        """Open the chart titled `title` full screen; returns the dialog's content, once the chart is drawn."""
        self.card(title).find_element(By.CSS_SELECTOR, "[data-component-id=fullscreen_button_chartcard]").click()
        # parallel coordinates draw on canvases, the other charts are plotly SVGs
        return self.find("//*[@role='dialog'][.//canvas or .//*[contains(@class, 'main-svg')]]//*[contains(@class, 'modal-content')]")

    def open_artifact(self, experiment_id: str, run_id: str, path: str):
        """The run's artifact `path` previewed on its Artifacts tab (assistant closed, sidebar hidden); returns the image."""
        self.driver.get(f"{self.base_url}/#/experiments/{experiment_id}/runs/{run_id}/artifacts/{path}")
        self.driver.refresh()  # a new hash on the same page does not reload the preview
        image = self.find(f"//img[@alt='{path}']")
        for close in self.driver.find_elements(By.XPATH, "//button[@aria-label='Close'][not(ancestor::*[@role='dialog'])]"):
            if close.is_displayed():
                close.click()
        self.collapse_sidebar()
        self.wait.until(lambda d: image.get_attribute("complete") == "true" and int(image.get_attribute("naturalWidth")) > 0)
        return image

    def close_dialog(self) -> None:
        """Close the open dialog and wait until it is gone."""
        self.click("//*[@role='dialog']//button[@aria-label='Close']")
        self.wait.until(lambda d: not any(e.is_displayed() for e in d.find_elements(By.XPATH, "//*[@role='dialog']")))


def screenshot(png: bytes, *paths: Path) -> None:
    """Write the PNG to every path."""
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)
