"""Real `ansible-playbook` runs with the JSON callback, over inventories of simulated node trees, and a real
headless chromium driven over the Chrome DevTools protocol for the pages people look at."""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import websocket
import yaml

REPO = Path(__file__).resolve().parents[2]


class PlaybookRun:
    """The JSON callback's output, indexed by task name and host."""

    def __init__(self, completed: subprocess.CompletedProcess[str]) -> None:
        self.returncode = completed.returncode
        self.stderr = completed.stderr
        try:
            self.data = json.loads(completed.stdout)
        except json.JSONDecodeError as error:
            raise AssertionError(
                f"ansible-playbook printed no JSON:\n{completed.stdout}\n{completed.stderr}"
            ) from error

    def result(self, task: str, host: str) -> dict[str, Any]:
        for play in self.data["plays"]:
            for entry in play["tasks"]:
                if entry["task"]["name"] == task and host in entry["hosts"]:
                    return entry["hosts"][host]
        raise KeyError(f"no result for task {task!r} on host {host!r}")

    @property
    def stats(self) -> dict[str, Any]:
        return self.data["stats"]


@pytest.fixture(scope="session")
def playbook(ansible_playbook_cli):
    """``run(run_dir, tasks, hosts, check_mode=False) -> PlaybookRun``: one play over local-connection hosts."""

    def run(
        run_dir: Path, tasks: list[dict[str, Any]], hosts: dict[str, dict[str, Any]], check_mode: bool = False
    ) -> PlaybookRun:
        inventory = {
            "all": {
                "hosts": {
                    name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **variables}
                    for name, variables in hosts.items()
                }
            }
        }
        (run_dir / "inventory.yml").write_text(yaml.safe_dump(inventory))
        play = [{"name": "integration", "hosts": "all", "gather_facts": False, "tasks": tasks}]
        (run_dir / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
        args = ["-i", "inventory.yml", *(["--check"] if check_mode else [])]
        completed = ansible_playbook_cli(
            "play.yml", *args, env={"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"}, cwd=run_dir
        )
        return PlaybookRun(completed)

    return run


# ---------------------------------------------------------------------------------------------------
# Headless chromium over the Chrome DevTools protocol
# ---------------------------------------------------------------------------------------------------

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    return next((path for path in map(shutil.which, CANDIDATES) if path), None)


class Browser:
    """One headless chromium with one page; ``problems`` collects console errors and uncaught exceptions."""

    def __init__(self, binary: str, width: int = 1400, height: int = 1000) -> None:
        self.profile = tempfile.mkdtemp(prefix="tee-chromium-")
        args = [
            binary,
            "--headless=new",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--remote-debugging-port=0",
            f"--user-data-dir={self.profile}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # chromium refuses to run as root with its sandbox
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.ids = itertools.count(1)
        self.problems: list[str] = []
        self.socket = websocket.create_connection(self._page_url(), timeout=60)

    def _page_url(self) -> str:
        active = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not active.is_file() or not active.read_text().strip():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = active.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as response:
            targets = json.load(response)
        return next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")

    def _note(self, message: dict) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.problems.append("exception: " + details.get("exception", {}).get("description", details["text"]))
        elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            values = [argument.get("value") for argument in params["args"]]
            self.problems.append(f"console.{params['type']}: {values}")
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.problems.append("log: " + params["entry"]["text"])

    def call(self, method: str, **params) -> dict:
        ident = next(self.ids)
        self.socket.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]
            self._note(message)

    def wait_for(self, event: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = json.loads(self.socket.recv())
            self._note(message)
            if message.get("method") == event:
                return
        raise TimeoutError(event)

    def open(self, path: Path) -> None:
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        self.call("Page.navigate", url=path.resolve().as_uri())
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def screenshot(self) -> bytes:
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        return base64.b64decode(shot["data"])

    def close(self) -> None:
        try:
            self.socket.close()
        finally:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
            shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture
def browser():
    """A headless chromium page; skips (saying why) only when chromium is missing and cannot be installed."""
    binary = find_chromium()
    if binary is None:
        subprocess.run([str(REPO / "scripts" / "sysdeps.sh")], check=False, capture_output=True, timeout=900)
        binary = find_chromium()
    if binary is None:
        pytest.skip("chromium is not installed and scripts/sysdeps.sh could not install it (apt-get install chromium)")
    opened = Browser(binary)
    yield opened
    opened.close()
