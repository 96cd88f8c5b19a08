"""The results page (`fedbench report --format html`) in a real browser: headless Chromium driven by
Selenium opens it from disk with the network off; it loads with no console error, a click on a header
sorts the table, and every figure decodes to a nonzero size. In CI (CI=true) a missing Chromium fails
the test: the page is part of the product."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import require_data
from tests.tracking.test_report import cli, store  # noqa: F401  (the module's MLflow store fixture)

CHROME_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage")


def browser(profile):
    """Headless Chromium (Debian's chromium and chromium-driver) with a fresh profile; skipped outside CI
    where they are not installed, a failure in CI."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (binary and driver):
        message = "chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)"
        require_data(False, message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (*CHROME_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=options)


@pytest.mark.slow  # a browser (issue 43: `pytest -m "not slow"` is the quick loop)
def test_the_results_page_loads_sorts_and_shows_its_figures_offline(store, tmp_path):  # noqa: F811
    uri, _ = store
    page = tmp_path / "pages" / "report.html"
    out = cli("report", "--uri", uri, "--target", "0.8", "--baseline", "fedavg", "--format", "html", "--output", str(page))
    assert out.exit_code == 0, out.output
    text = page.read_text()
    assert "http://" not in text and "https://" not in text  # nothing fetched: it opens offline
    driver = browser(tmp_path / "profile")
    try:
        driver.get(page.as_uri())
        errors = [entry for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]
        assert errors == []
        from selenium.webdriver.common.by import By

        table = driver.find_element(By.CSS_SELECTOR, "table.sortable")
        headers = [th.text.strip() for th in table.find_elements(By.CSS_SELECTOR, "thead th")]
        assert "speed-up vs fedavg" in headers

        def column(name: str) -> list[str]:
            i = headers.index(name)
            return [row.find_elements(By.TAG_NAME, "td")[i].text for row in table.find_elements(By.CSS_SELECTOR, "tbody tr")]

        header = table.find_elements(By.CSS_SELECTOR, "thead th")[headers.index("rounds_to_0.8")]
        assert column("algorithm") == ["fedavg", "scaffold"]  # scaffold reaches 0.8 in fewer rounds
        header.click()
        up = column("rounds_to_0.8")
        assert [float(v.split()[0]) for v in up] == sorted(float(v.split()[0]) for v in up)
        assert column("algorithm") == ["scaffold", "fedavg"]  # whole rows move
        header.click()
        assert column("rounds_to_0.8") == up[::-1] and column("algorithm") == ["fedavg", "scaffold"]
        images = driver.find_elements(By.TAG_NAME, "img")
        assert images
        for img in images:
            assert driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth * arguments[0].naturalHeight", img) > 0
        assert driver.get_log("browser") == []
    finally:
        driver.quit()
