"""The dashboard in a real browser: a live daemon on the bundled model, real HTTP, Debian's
headless Chromium driven by Selenium through chromedriver.

The daemon's home holds two published adapters (random but real LoRAs, converted to GGUF), one
that the real gate rejected (a NaN in its weights), a few dozen recorded turns from
bench/serving/dashboard_data.py, one hostile turn, and two turns the model answers during the test.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest
from conftest import Daemon
from publish_util import make_adapter

from bench.serving.dashboard_data import seed
from clawd.config import Settings, bundled_model_path  # noqa: E402
from clawd.publish import Adapters  # noqa: E402
from clawd.publish.convert import BaseInfo, convert_adapter  # noqa: E402
from clawd.serve.dashboard import CSP  # noqa: E402
from clawd.store.records import Feedback, GateResult, Judgment, NextState, Turn  # noqa: E402
from clawd.store.store import Store  # noqa: E402
from clawd.train.samples import ready_turns  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
HOSTILE = '<script>window.__pwned = 1; alert("xss")</script><img src=x onerror="window.__pwned = 2; alert(2)">'
KEY = "dashboard-key-0123"


def add_hostile_turn(store: Store) -> tuple[str, int]:
    """A turn whose every text is markup: the session key, the question, the answer, what came
    next, the judge's hint and the user's comment."""
    sid = store.open_session("<img src=x onerror=alert(3)>")
    t = Turn(session_id=sid, index=0, kind="main", completion_id="chatcmpl-hostile", prompt_ids=[1, 2],
             request={"messages": [{"role": "user", "content": "Print this: " + HOSTILE}]})
    store.insert_turn(t)
    t.text, t.status, t.completion_ids, t.logprobs = HOSTILE, "ok", [3, 4], [-1.0, -1.0]
    store.finish_turn(t)
    store.add_next_state(NextState(turn_id=t.id, role="user", content=HOSTILE, messages=[]))
    store.add_judgment(Judgment(turn_id=t.id, method="ask", score=-1, judge_model="m", hint=HOSTILE))
    store.set_feedback(Feedback(turn_id=t.id, score=-1, comment=HOSTILE, hint=None))
    return t.completion_id, sid


@pytest.fixture(scope="module")
def dash(tmp_path_factory):
    home = tmp_path_factory.mktemp("dash") / "home"
    home.mkdir(parents=True)
    store = Store(home / "clawd.db")
    adapters = Adapters(Settings(home=home, threads=1), store)
    base = BaseInfo.of(bundled_model_path())
    for version, s in ((1, 11), (2, 12)):
        make_adapter(adapters.registry.dir(version), sigma=0.2, seed=s)
    make_adapter(adapters.registry.dir(3), sigma=0.01, seed=13, nan=True)
    adapters.registry.rows()  # registers the three directories
    for version in (1, 2):  # the gate has its own tests: these two are registered as having passed it
        convert_adapter(adapters.registry.dir(version), base, adapters.registry.gguf(version))
        store.set_adapter_status(version, "published", gate=GateResult(True, [], checks={"note": "test"}))
    assert not adapters.prepare(3)[1].passed  # the real gate: non-finite weights
    adapters.registry.set_current(2)
    seeded = seed(store, 36, per_session=6)
    hostile, hostile_session = add_hostile_turn(store)
    store.close()
    # idle_seconds: nothing judges or trains the seeded rows while the test looks at them
    d = Daemon(home, "--threads", "1", "--idle-seconds", "3600").start()
    real = [d.client().chat.completions.create(model="clawd", max_tokens=24, temperature=0, messages=[
        {"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": q}]).id
        for q in ("Name a fruit.", "What is the capital of Spain?")]
    yield {"d": d, "seeded": seeded, "hostile": hostile, "hostile_session": hostile_session, "real": real}
    d.stop()


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="pip install selenium (the 'test' extra)")
    from selenium.webdriver.chrome.service import Service

    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        pytest.skip(f"{' and '.join(missing)} missing: apt-get install chromium chromium-driver "
                    "(scripts/install.sh test does it as root)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000",
              "--hide-scrollbars", "--lang=en-US"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    yield driver
    driver.quit()


def wait(cond, timeout: float = 30, what: str = "condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            value = cond()
        except Exception:  # noqa: BLE001 - an element re-rendered under us: look again
            value = None
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def open_page(driver, url: str) -> None:
    driver.get(url)
    wait(lambda: driver.execute_script("return document.body.dataset.ready === '1'"), what="the first render")


def problems(driver) -> list:
    """Console errors (CSP violations included) and requests that did not answer 2xx/3xx."""
    logs = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    bad = driver.execute_script(
        "return performance.getEntriesByType('resource').filter(e => !(e.responseStatus >= 200 && "
        "e.responseStatus < 400)).map(e => [e.name, e.responseStatus])")
    return logs + bad


def card(driver, completion_id: str):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, f'article[data-completion="{completion_id}"]')


def served(d: Daemon) -> tuple:
    models = httpx.get(d.url + "/v1/models").json()["data"][0]["adapter"]
    adapter = httpx.get(d.url + "/v1/clawd/status").json()["adapter"]
    return models, adapter["version"] if adapter else None


# -- without a browser ------------------------------------------------------------------------------
def test_page_and_static_files_carry_a_strict_csp(dash):
    d = dash["d"]
    for path, ctype in (("/", "text/html"), ("/static/app.js", "text/javascript"), ("/static/charts.js", "text/javascript"),
                        ("/static/style.css", "text/css"), ("/static/icon.svg", "image/svg+xml")):
        r = httpx.get(d.url + path)
        assert r.status_code == 200 and r.headers["content-type"].startswith(ctype), path
        assert r.headers["content-security-policy"] == CSP
        assert "default-src 'none'" in CSP and "script-src 'self';" in CSP and "frame-ancestors 'none'" in CSP
        assert r.headers["x-content-type-options"] == "nosniff"
    r = httpx.get(d.url + "/static/../store.py")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert httpx.get(d.url + "/static/index.html").status_code == 404  # a fixed list, not the directory
    html = httpx.get(d.url + "/").text
    assert "<style" not in html and "style=" not in html and "<script>" not in html  # nothing inline to allow
    static = ROOT / "clawd" / "serve" / "static"
    for f in ("app.js", "charts.js"):
        code = (static / f).read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
            assert sink not in code, f"{f} uses {sink}"
    assert "http" not in (static / "style.css").read_text()  # nothing fetched off the machine


def test_data_endpoints_page_by_keyset_and_refuse_bad_input(dash):
    d = dash["d"]
    seen, before = [], None
    while True:
        r = httpx.get(d.url + "/v1/clawd/turns", params={"limit": 7, **({"before": before} if before else {})}).json()
        seen += [t["id"] for t in r["data"]]
        before = r["next_before"]
        if before is None:
            break
    assert seen == sorted(seen, reverse=True) and len(seen) == len(set(seen)) == 36 + 1 + 2
    rewards = httpx.get(d.url + "/v1/clawd/rewards", params={"buckets": 5}).json()
    assert 1 <= len(rewards["buckets"]) <= 5 and rewards["scored"] == sum(b["n"] for b in rewards["buckets"])
    for path, params, status, param in (
            ("/v1/clawd/turns", {"limit": 0}, 400, "limit"), ("/v1/clawd/turns", {"limit": 101}, 400, "limit"),
            ("/v1/clawd/turns", {"before": "x"}, 400, "before"), ("/v1/clawd/sessions", {"before": -1}, 400, "before"),
            ("/v1/clawd/rewards", {"buckets": 500}, 400, "buckets")):
        r = httpx.get(d.url + path, params=params)
        assert r.status_code == status and r.json()["error"]["param"] == param, (path, params)
    for path, body, status in (("/v1/clawd/sessions/abc/exclude", None, 400), ("/v1/clawd/sessions/99999/exclude", None, 404),
                               ("/v1/clawd/sessions/1/forget", None, 404), ("/v1/clawd/learning/sideways", None, 404),
                               ("/v1/clawd/sessions/99999999999999999999999/exclude", None, 400),
                               ("/v1/clawd/sessions/²/exclude", None, 400),
                               ("/v1/clawd/adapters/use", b"{not json", 400),
                               ("/v1/clawd/learning/pause", b"{not json", 400)):
        r = httpx.post(d.url + path, content=body)
        assert r.status_code == status and r.json()["error"]["message"], path
    # a web page elsewhere cannot drive the daemon through the user's browser
    r = httpx.post(d.url + "/v1/clawd/learning/pause", headers={"Origin": "http://evil.example"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "cross_origin"
    r = httpx.get(d.url + "/v1/clawd/turns", headers={"Host": f"evil.example:{d.port}"})  # DNS rebinding
    assert r.status_code == 403 and r.json()["error"]["code"] == "host_not_allowed"
    assert httpx.get(d.url + "/v1/clawd/learning").json() == {"paused": False}


# -- in the browser ---------------------------------------------------------------------------------
def test_page_loads_with_no_failed_request_and_no_console_error(dash, browser):
    from selenium.webdriver.common.by import By

    d = dash["d"]
    open_page(browser, d.url + "/")
    assert browser.title == "clawd"
    assert "clawd · adapter v2" in browser.find_element(By.ID, "live-text").text
    wait(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#trend circle")) > 2, what="the reward trend")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#adapters li.adapter")) == 3
    rejected = browser.find_element(By.CSS_SELECTOR, '#adapters li[data-version="3"]')
    assert "rejected" in rejected.text and "non-finite weights" in rejected.text
    assert browser.find_elements(By.CSS_SELECTOR, f'article[data-completion="{dash["real"][-1]}"]')
    assert problems(browser) == []


def test_thumbs_down_with_a_comment_lands_in_sqlite_and_shows(dash, browser):
    from selenium.webdriver.common.by import By

    d, cid = dash["d"], dash["real"][0]
    open_page(browser, d.url + "/")
    comment = "Name one fruit in a single word."
    card(browser, cid).find_element(By.CSS_SELECTOR, "input.comment").send_keys(comment)
    card(browser, cid).find_element(By.CSS_SELECTOR, "button.thumb.down").click()
    wait(lambda: "your comment:" in card(browser, cid).text, what="the turn to show the feedback")
    shown = card(browser, cid).text
    assert comment in shown and "you 👎 −1" in shown and "kept as the hint" in shown
    store = Store(d.db)
    try:
        turn = store.turn_by_completion_id(cid)
        fb = store.feedback(turn.id)
    finally:
        store.close()
    assert (fb.score, fb.comment) == (-1, comment) and comment in fb.hint  # the comment became the turn's hint
    assert problems(browser) == []


def test_roll_back_changes_what_models_and_status_report(dash, browser):
    from selenium.webdriver.common.by import By

    d = dash["d"]
    assert served(d) == (2, 2)
    open_page(browser, d.url + "/")
    browser.find_element(By.ID, "rollback").click()
    wait(lambda: browser.find_element(By.ID, "adapters-sub").text == "live: v1", what="the rollback")
    assert served(d) == (1, 1)
    assert "retired" in browser.find_element(By.CSS_SELECTOR, '#adapters li[data-version="2"]').text
    wait(lambda: "adapter v1" in browser.find_element(By.ID, "live-text").text, what="the live state")
    assert problems(browser) == []


def test_a_hostile_answer_renders_as_inert_text(dash, browser):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    d = dash["d"]
    open_page(browser, d.url + "/")
    time.sleep(1.0)  # let an image error or a script have its chance
    turn = card(browser, dash["hostile"])
    assert turn.find_element(By.CSS_SELECTOR, ".block.answer .text").text == HOSTILE
    assert turn.find_element(By.CSS_SELECTOR, ".block.next .text").text == HOSTILE
    assert turn.find_element(By.CSS_SELECTOR, ".block.user .text").text == "Print this: " + HOSTILE
    assert f"judge's hint: {HOSTILE}" in turn.text and f"your comment: {HOSTILE}" in turn.text
    key = browser.find_element(By.CSS_SELECTOR, f'#sessions tr[data-session="{dash["hostile_session"]}"] button.link')
    assert "<img src=x onerror=a" in key.text and key.get_attribute("title") == "<img src=x onerror=alert(3)>"
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 - raises when there is none
    state = browser.execute_script("return [window.__pwned === undefined, document.title, "
                                   "document.querySelectorAll('img').length, document.scripts.length]")
    assert state == [True, "clawd", 1, 2]  # only the brand icon, only the two shipped scripts
    assert problems(browser) == []


def test_pause_learning_and_exclude_a_session_from_the_page(dash, browser):
    from selenium.webdriver.common.by import By

    d = dash["d"]
    open_page(browser, d.url + "/")
    browser.find_element(By.ID, "learn-toggle").click()
    wait(lambda: browser.find_element(By.ID, "paused-pill").is_displayed(), what="the paused state")
    assert httpx.get(d.url + "/v1/clawd/status").json()["training"]["paused"] is True
    store = Store(d.db)
    try:
        assert store.learning_paused()
        session = dash["seeded"]["sessions"][-1]
        before = set(ready_turns(store, "combined", 1000))
        browser.find_element(By.CSS_SELECTOR, f'#sessions tr[data-session="{session}"] button[data-exclude]').click()
        wait(lambda: "excluded" in browser.find_element(By.CSS_SELECTOR, f'#sessions tr[data-session="{session}"]')
             .get_attribute("class"), what="the session to show excluded")
        theirs = {t.id for t in store.turn_views(session_id=session, limit=100)}
        assert store.excluded_turns(sorted(theirs)) == sorted(theirs)
        assert set(ready_turns(store, "combined", 1000)) == before - theirs
        browser.find_element(By.ID, "learn-toggle").click()
        wait(lambda: not browser.find_element(By.ID, "paused-pill").is_displayed(), what="learning to resume")
        assert not store.learning_paused()
    finally:
        store.close()
    assert problems(browser) == []


def test_screenshot_of_the_page(dash, browser):
    """bench/out/dashboard.png, from the state the tests above left (docs/dashboard.png is a copy)."""
    open_page(browser, dash["d"].url + "/")
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1280, min(height + 40, 4000))
    time.sleep(0.5)
    out = ROOT / "bench" / "out" / "dashboard.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(out))
    browser.set_window_size(1280, 1000)
    assert problems(browser) == []


def test_with_an_api_key_the_page_needs_it(fresh_home, browser):
    from selenium.webdriver.common.by import By

    d = Daemon(fresh_home, "--threads", "1", "--api-key", KEY).start()
    try:
        r = httpx.get(d.url + "/")
        assert r.status_code == 401 and "/?key=" in r.text and r.headers["content-security-policy"] == CSP
        assert httpx.get(d.url + "/static/app.js").status_code == 401
        r = httpx.get(d.url + "/v1/clawd/turns")
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(d.url + "/", params={"key": "wrong"}).status_code == 401
        r = httpx.get(d.url + "/", params={"key": KEY})
        assert r.status_code == 303 and r.headers["location"] == "/"
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict") and KEY not in cookie
        name, value = cookie.split(";")[0].split("=", 1)
        assert httpx.get(d.url + "/v1/clawd/turns", cookies={name: value}).status_code == 200
        assert httpx.get(d.url + "/v1/clawd/turns", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200

        browser.get(d.url + "/")
        assert "needs its API key" in browser.find_element(By.TAG_NAME, "h1").text
        browser.get_log("browser")  # the 401 itself is logged; what follows must be clean
        open_page(browser, f"{d.url}/?key={KEY}")
        assert browser.current_url == d.url + "/"  # the key left the address bar
        wait(lambda: "clawd · base weights" in browser.find_element(By.ID, "live-text").text, what="the live state")
        jar = browser.get_cookie(name)
        assert jar["httpOnly"] and jar["sameSite"] == "Strict"
        assert browser.execute_script("return document.cookie") == ""  # HttpOnly: no script sees it
        assert problems(browser) == []
        browser.delete_all_cookies()
    finally:
        d.stop()
