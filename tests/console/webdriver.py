#!/usr/bin/env python3
"""The console's forms in a real browser, driven over WebDriver (Debian's chromedriver and
chromium, headless): the standard library speaks the W3C WebDriver HTTP protocol to
chromedriver, so nothing is downloaded at run time.

Called by tests/console/run.sh with a broker started with --console-write (--admin,
--bootstrap) and one without (--readonly-admin, --readonly-bootstrap). Cases: create a
topic through the form (click, confirm) and see it listed and in the CLI's topic list; a
bad config value shows Kafka's error; alter a config; a form with a bad or missing CSRF
token is refused; a group's lag shows, rises after a reset to earliest through the form,
and falls to 0 after the group consumes; delete a topic; the read-only console shows no
forms and refuses a POST with 403, nothing changed; the overview's produce→ack and
fdatasync charts draw a point a second in real time while a load runs (--load). Prints PASS/FAIL per case; a failed
case keeps a screenshot (path printed). CONSOLE_SCREENSHOTS=DIR saves screenshots of the
new pages in DIR. Without chromedriver (or confluent-kafka for the group consumer) it
says SKIPPED and why."""

import argparse
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"


class WebDriverError(Exception):
    pass


class Browser:
    """One chromedriver process and one session."""

    def __init__(self, chromedriver, chromium):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.log = tempfile.NamedTemporaryFile(prefix="chromedriver-", suffix=".log", delete=False)
        self.driver = subprocess.Popen(
            [chromedriver, f"--port={port}"], stdout=self.log, stderr=subprocess.STDOUT
        )
        self.base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 20
        while True:
            try:
                self._call("GET", "/status")
                break
            except (OSError, WebDriverError):
                if time.time() > deadline:
                    raise WebDriverError("chromedriver did not start: see " + self.log.name)
                time.sleep(0.1)
        options = {
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1100,900",
                     "--hide-scrollbars"],
        }
        capabilities = {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}
        session = self._call("POST", "/session", {"capabilities": capabilities})
        self.session = "/session/" + session["sessionId"]

    def _call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read())["value"]
        except urllib.error.HTTPError as e:
            raise WebDriverError(f"{method} {path}: {e.code} {e.read()[:500]!r}") from None

    def call(self, method, path, body=None):
        return self._call(method, self.session + path, body)

    def go(self, url):
        self.call("POST", "/url", {"url": url})

    def find(self, css):
        return self.call("POST", "/element", {"using": "css selector", "value": css})[ELEMENT]

    def type(self, css, text):
        element = self.find(css)
        self.call("POST", f"/element/{element}/clear", {})
        self.call("POST", f"/element/{element}/value", {"text": text})

    def click(self, css):
        self.call("POST", f"/element/{self.find(css)}/click", {})

    def source(self):
        return self.call("GET", "/source")

    def text(self, css):
        return self.call("GET", f"/element/{self.find(css)}/text")

    def script(self, body, *args):
        return self.call("POST", "/execute/sync", {"script": body, "args": list(args)})

    def fetch(self, body, *args):
        """Runs `body` as an async function (its return value is awaited)."""
        wrapped = ("const done = arguments[arguments.length - 1];"
                   "(async (...a) => {" + body + "})(...arguments).then(done, e => done('error: ' + e));")
        return self.call("POST", "/execute/async", {"script": wrapped, "args": list(args)})

    def screenshot(self, path):
        with open(path, "wb") as f:
            f.write(base64.b64decode(self.call("GET", "/screenshot")))

    def wait_for(self, what, predicate, limit=20):
        deadline = time.time() + limit
        while True:
            try:
                if predicate():
                    return
            except WebDriverError:
                pass
            if time.time() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.2)

    def quit(self):
        try:
            self.call("DELETE", "")
        except (OSError, WebDriverError):
            pass
        self.driver.terminate()
        self.driver.wait(10)


class Run:
    def __init__(self, args, browser):
        self.args = args
        self.browser = browser
        self.failed = 0

    def url(self, path, readonly=False):
        return f"http://{self.args.readonly_admin if readonly else self.args.admin}{path}"

    def cli(self, *command, readonly=False):
        bootstrap = self.args.readonly_bootstrap if readonly else self.args.bootstrap
        out = subprocess.run([self.args.cli, "--bootstrap", bootstrap, *command],
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise AssertionError(f"{' '.join(command)} failed: {out.stderr}")
        return out.stdout

    def shot(self, name):
        if os.environ.get("CONSOLE_SCREENSHOTS"):
            self.browser.screenshot(os.path.join(os.environ["CONSOLE_SCREENSHOTS"], name))

    def case(self, name, body):
        try:
            body()
            print(f"PASS {name}")
        except (AssertionError, WebDriverError, OSError) as e:
            self.failed = 1
            kept = tempfile.NamedTemporaryFile(prefix="console-failure-", suffix=".png", delete=False)
            kept.close()
            try:
                self.browser.screenshot(kept.name)
                source = self.browser.source()[:3000]
            except (WebDriverError, OSError) as shot_error:
                source = f"(no screenshot: {shot_error})"
            print(f"FAIL {name}: {e}\n  screenshot: {kept.name}; page:")
            print("\n".join("  | " + line for line in source.splitlines()))

    def submit_and_confirm(self, form_id, expect_summary):
        b = self.browser
        b.click(f"#{form_id} button")
        b.wait_for("the confirmation", lambda: expect_summary in b.text("#summary"))
        return lambda: (b.click(f"#{form_id} button"),
                        b.wait_for("the done page", lambda: b.find("#done")))


def create_topic(run):
    b = run.browser
    b.go(run.url("/topics"))
    b.type("#create-topic input[name=name]", "webdriver-made")
    b.type("#create-topic input[name=partitions]", "2")
    b.type("#create-topic textarea[name=configs]", "retention.ms=3600000")
    confirm = run.submit_and_confirm("create-topic", "Create topic webdriver-made with 2 partitions")
    assert "webdriver-made" not in run.cli("topic", "list"), "created before the confirmation"
    run.shot("console-confirm.png")
    confirm()
    b.go(run.url("/topics"))
    assert '<a href="/topics/webdriver-made">webdriver-made</a>' in b.source(), "not listed"
    assert "webdriver-made" in run.cli("topic", "list"), "not in the CLI's topic list"


def bad_config_shows_kafkas_error(run):
    b = run.browser
    b.go(run.url("/topics"))
    b.type("#create-topic input[name=name]", "bad-config")
    b.type("#create-topic textarea[name=configs]", "retention.ms=soon")
    b.click("#create-topic button")
    b.wait_for("the error", lambda: "INVALID_CONFIG" in b.text("#error"))
    run.shot("console-error.png")
    assert "bad-config" not in run.cli("topic", "list")


def alter_config(run):
    b = run.browser
    b.go(run.url("/topics/webdriver-made"))
    b.type("#alter-configs textarea[name=set]", "retention.ms=5000")
    run.submit_and_confirm("alter-configs", "Change the configs of topic webdriver-made")()
    b.go(run.url("/topics/webdriver-made"))
    assert "<td>retention.ms</td><td>5000</td>" in b.source(), "the config is not shown"
    assert "5000" in run.cli("topic", "describe", "webdriver-made")


def bad_csrf_token_is_refused(run):
    b = run.browser
    for tamper, label in [("i.value = 'bad';", "bad"), ("i.remove();", "missing")]:
        b.go(run.url("/topics"))
        b.type("#create-topic input[name=name]", "forged")
        b.script("const i = document.querySelector('#create-topic input[name=csrf]');" + tamper)
        b.click("#create-topic button")
        b.wait_for(f"the refusal of a {label} token",
                   lambda: "CSRF token is missing or wrong" in b.text("#error"))
    assert "forged" not in run.cli("topic", "list")


def group_lag_rises_after_a_reset_and_falls_after_consuming(run):
    from confluent_kafka import Consumer  # checked by main()
    b = run.browser
    topic, group = "lagged", "watchers"
    run.cli("topic", "create", topic, "--partitions", "2")
    produced = 12
    lines = "".join(f'{{"n":{i}}}\n' for i in range(produced))
    out = subprocess.run([run.args.cli, "--bootstrap", run.args.bootstrap, "produce", topic],
                         input=lines, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr

    def consume_all():
        consumer = Consumer({"bootstrap.servers": run.args.bootstrap, "group.id": group,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False,
                             "enable.partition.eof": True, "fetch.wait.max.ms": 100})
        consumer.subscribe([topic])
        at_end, deadline = set(), time.time() + 60
        while len(at_end) < 2 and time.time() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() == -191:  # _PARTITION_EOF
                    at_end.add(message.partition())
                continue
            consumer.commit(message=message, asynchronous=False)
        consumer.close()
        assert len(at_end) == 2, "the group did not reach the end of both partitions"

    total_lag = lambda: int(b.text("#total-lag"))
    consume_all()
    b.go(run.url(f"/groups/{group}"))
    assert total_lag() == 0, f"lag {total_lag()} after consuming everything"
    b.click("#reset-offsets select[name=to] option:nth-child(1)")  # earliest
    b.type("#reset-offsets input[name=topic]", topic)
    run.submit_and_confirm("reset-offsets", "Reset the committed offsets of group watchers")()
    b.go(run.url(f"/groups/{group}"))
    assert total_lag() == produced, f"lag {total_lag()} after a reset to earliest"
    b.wait_for("the lag chart's first point",
               lambda: int(b.script(
                   "return document.getElementById('lag-chart').getAttribute('data-points')")) >= 1)
    run.shot("console-group.png")
    b.go(run.url("/groups"))
    assert f'<a href="/groups/{group}">{group}</a></td><td>Empty</td><td>0</td>' in b.source()
    consume_all()
    b.go(run.url(f"/groups/{group}"))
    assert total_lag() == 0, f"lag {total_lag()} after consuming again"


def overview_charts_draw_in_real_time_under_load(run):
    b = run.browser
    load = subprocess.Popen([run.args.load, "e2e", "--bootstrap", run.args.bootstrap,
                             "--rate", "200", "--secs", "30", "--size", "256", "--acks", "all",
                             "--partitions", "3"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        b.go(run.url("/"))
        points = lambda chart: int(b.script(
            f"return document.getElementById('{chart}').getAttribute('data-points')"))
        # One point a second for each interval with produces in it (the load starts within
        # a second or two): 10 points take 10 s or a little more.
        b.wait_for("10 points on both charts",
                   lambda: points("chart") >= 10 and points("fsync-chart") >= 10, limit=40)
        text = b.text("#live-text")
        assert "fdatasync p50 ≤ " in text and "fetched " in text, text
        run.shot("console-overview.png")
    finally:
        load.kill()
        load.wait()


def delete_topic(run):
    b = run.browser
    b.go(run.url("/topics/webdriver-made"))
    run.submit_and_confirm("delete-topic", "Delete topic webdriver-made")()
    b.go(run.url("/topics"))
    assert "/topics/webdriver-made" not in b.source(), "still listed"
    assert "webdriver-made" not in run.cli("topic", "list"), "still in the CLI's topic list"


def read_only_console_refuses_posts(run):
    b = run.browser
    # A well-formed form, token included (the write-enabled console's: the read-only one
    # shows none); the read-only refusal comes before the token is looked at.
    b.go(run.url("/topics"))
    token = b.script("return document.querySelector('#create-topic input[name=csrf]').value")
    b.go(run.url("/topics", readonly=True))
    assert "/actions/" not in b.source(), "a form on the read-only console"
    body = f"name=ro-made&partitions=1&csrf={token}&confirm=yes"
    answer = b.fetch("const r = await fetch('/actions/create-topic', {method: 'POST', "
                     "headers: {'Content-Type': 'application/x-www-form-urlencoded'}, "
                     "body: a[0]}); return [r.status, await r.text()];", body)
    assert answer[0] == 403, f"answered {answer}"
    assert "read-only" in answer[1], answer[1]
    b.go(run.url("/topics", readonly=True))
    assert "ro-made" not in b.source()
    assert "ro-made" not in run.cli("topic", "list", readonly=True)


def main():
    parser = argparse.ArgumentParser()
    for flag in ["--admin", "--bootstrap", "--readonly-admin", "--readonly-bootstrap", "--cli",
                 "--load"]:
        parser.add_argument(flag, required=True)
    args = parser.parse_args()
    chromedriver = shutil.which("chromedriver") or (
        "/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromedriver or not chromium:
        print("console WebDriver test SKIPPED: no chromedriver or chromium "
              "(apt-get install chromium chromium-driver)")
        return 0
    try:
        import confluent_kafka  # noqa: F401 (the group consumer)
        have_consumer = True
    except ImportError:
        have_consumer = False
    browser = Browser(chromedriver, chromium)
    run = Run(args, browser)
    try:
        run.case("a topic created through the form (click, confirm) is listed and in the CLI",
                 lambda: create_topic(run))
        run.case("a bad config value shows Kafka's error on the page",
                 lambda: bad_config_shows_kafkas_error(run))
        run.case("a config altered through the form shows on the topic page and in the CLI",
                 lambda: alter_config(run))
        run.case("a form with a bad or missing CSRF token is refused, nothing created",
                 lambda: bad_csrf_token_is_refused(run))
        if have_consumer:
            run.case("a group's lag rises after a reset to earliest and falls to 0 after it consumes",
                     lambda: group_lag_rises_after_a_reset_and_falls_after_consuming(run))
        else:
            print("SKIPPED the group lag case: no confluent-kafka for the group consumer "
                  "(pip install confluent-kafka)")
        run.case("the overview's charts draw a point a second in real time while a load runs",
                 lambda: overview_charts_draw_in_real_time_under_load(run))
        run.case("a topic deleted through the form is gone from the list and the CLI",
                 lambda: delete_topic(run))
        run.case("the read-only console shows no forms and refuses a POST with 403",
                 lambda: read_only_console_refuses_posts(run))
    finally:
        browser.quit()
    return run.failed


if __name__ == "__main__":
    sys.exit(main())
