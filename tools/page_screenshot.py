"""A screenshot of the server's web page after translating some text, in headless Chromium.

    python tools/page_screenshot.py --url=http://localhost:8501 --out=page.png \\
        [--text="A man is riding a bike."] [--text=...] [--beam_size=4] [--alpha=0.6] \\
        [--hover=2] [--width=1100] [--height=1300]

Opens the page of a running `python -m t2t_lite.serve` (its address as it prints when ready),
types the `--text` lines, picks the options, presses Translate, waits for the first
sentence's best hypothesis to be drawn as a heat map, hovers target piece `--hover` (so that
its source pieces are highlighted) and saves the window as a PNG. docs/serving.md's
pictures are made so. Needs Debian's `chromium` and `chromium-driver` and Selenium (the
`[test]` extra).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

# Headless, and nothing that reaches for the network on its own (this machine's network is
# closed; Chromium's background connections would only fail).
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)  # fmt: skip


def start_chromium(profile_dir: str, width: int = 1100, height: int = 1300):
    """A Selenium session with Debian's headless Chromium and a fresh profile in `profile_dir`."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        raise RuntimeError(
            "Chromium and its driver are needed: apt-get install chromium chromium-driver"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (*CHROMIUM_FLAGS, f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile_dir}")
    return webdriver.Chrome(options=options, service=Service(driver))


def open_page(browser, url: str, timeout: float = 120) -> None:
    """Loads the page and waits until it has read the model's description."""
    browser.get(url.rstrip("/") + "/")
    WebDriverWait(browser, timeout).until(lambda b: b.find_element(By.ID, "translate").is_enabled())


def translate(browser, text: str, beam=None, alpha=None, timeout: float = 300) -> None:
    """Types `text`, sets the options, clicks Translate and waits for the heat map.

    Raises:
        RuntimeError: the page showed an error (its text is the message).
    """
    source = browser.find_element(By.ID, "source")
    source.clear()
    source.send_keys(text)
    if beam is not None:
        Select(browser.find_element(By.ID, "beam-size")).select_by_value(str(beam))
    if alpha is not None:
        field = browser.find_element(By.ID, "alpha")
        field.clear()
        field.send_keys(str(alpha))
    browser.execute_script("document.getElementById('heatmap').replaceChildren()")
    browser.find_element(By.ID, "translate").click()
    WebDriverWait(browser, timeout).until(
        lambda b: (
            b.find_elements(By.CSS_SELECTOR, "#heatmap rect.cell")
            or b.find_element(By.CSS_SELECTOR, "#message.error")
        )
    )
    errors = browser.find_elements(By.CSS_SELECTOR, "#message.error")
    if errors:
        raise RuntimeError(f"the page says: {errors[0].text}")


def hover_target_piece(browser, index: int) -> None:
    """Moves the pointer over the heat map's row label `index` (a target piece)."""
    labels = browser.find_elements(By.CSS_SELECTOR, "#heatmap .row-label")
    if labels:
        ActionChains(browser).move_to_element(labels[min(index, len(labels) - 1)]).perform()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the server's address")
    parser.add_argument("--out", required=True, help="the PNG file to write")
    parser.add_argument("--text", action="append", help="a sentence (repeat for several)")
    parser.add_argument("--beam_size", type=int, default=None)
    parser.add_argument("--alpha", type=float, default=None)
    parser.add_argument("--hover", type=int, default=2, help="target piece to hover")
    parser.add_argument("--width", type=int, default=1100)
    parser.add_argument("--height", type=int, default=1300)
    args = parser.parse_args(argv)
    text = "\n".join(args.text or ["A man is riding a bike."])
    with tempfile.TemporaryDirectory(prefix="chromium_profile_") as profile:
        browser = start_chromium(profile, args.width, args.height)
        try:
            open_page(browser, args.url)
            translate(browser, text, args.beam_size, args.alpha)
            hover_target_piece(browser, args.hover)
            browser.save_screenshot(args.out)
        except RuntimeError as error:
            print(f"page_screenshot: {error}", file=sys.stderr)
            return 1
        finally:
            browser.quit()
    print(f"page_screenshot: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
