#!/usr/bin/python3
"""The console's own timing in a real browser: milliseconds from the page's script start to the
first chart drawn and to every top table filled (window.tapflowTiming), over a given view.

    bench/console_timing.py URL [RUNS]

Needs Debian's chromium, chromium-driver and python3-selenium. Prints one line per run and the
medians.
"""
import statistics
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

url = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
opts = Options()
opts.binary_location = "/usr/bin/chromium"
for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,800"):
    opts.add_argument(a)
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
charts, tops = [], []
try:
    for i in range(runs):
        driver.get(url)
        deadline = time.time() + 120
        while time.time() < deadline:
            t = driver.execute_script("return window.tapflowTiming")
            if t and "chart" in t and "top" in t:
                break
            time.sleep(0.05)
        else:
            sys.exit("the page did not finish: " + str(driver.execute_script(
                "return document.getElementById('error').textContent")))
        charts.append(t["chart"])
        tops.append(t["top"])
        print(f"run {i + 1}: first chart {t['chart']:.0f} ms, top tables {t['top']:.0f} ms")
finally:
    driver.quit()
print(f"median: first chart {statistics.median(charts):.0f} ms, "
      f"top tables {statistics.median(tops):.0f} ms")
