"""`tensorboard --logdir DATA_DIR/models/NAME`, the README's and quickstart.sh's command, starts
and serves the scalars a run's ProgressLogger wrote (TensorBoard 2.20 imports pkg_resources,
which setuptools 81 removed: setup.py and constraints.txt keep setuptools below 81)."""

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from electra_tf import progress

START_TIMEOUT = 180  # seconds; TensorBoard imports TensorFlow, slow on a loaded machine


def _scalars(url: str, run: str, tag: str) -> list:
    query = urllib.parse.urlencode({"run": run, "tag": tag})
    with urllib.request.urlopen(f"{url}/data/plugin/scalars/scalars?{query}", timeout=10) as r:
        return json.load(r)


def test_tensorboard_serves_a_runs_scalars(tmp_path):
    model_dir = tmp_path / "models" / "quickstart"
    logger = progress.ProgressLogger(str(model_dir), total_steps=100, start_step=0,
                                     examples_per_step=32)
    for step, loss in ((50, 24.75), (100, 21.5)):
        logger.log(step, {"loss": loss}, console_keys=("loss",))

    # --port 0: the server takes a free port and prints its address, so no port is guessed.
    proc = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(model_dir),
         "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        output = ""
        url = None
        while url is None:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, f"tensorboard exited {proc.poll()}:\n{output}"
            output += line
            found = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
            url = found and found.group(1)
            assert time.monotonic() < deadline, f"tensorboard did not start:\n{output}"
        values = []
        while len(values) < 2:  # the events are loaded in the background after start-up
            try:
                values = _scalars(url, ".", "loss")
            except urllib.error.HTTPError:
                values = []
            assert time.monotonic() < deadline, "tensorboard never served the loss"
            time.sleep(0.5)
        # [wall_time, step, value] per point
        assert [(step, value) for _, step, value in values] == [(50, 24.75), (100, 21.5)]
    finally:
        proc.kill()
        proc.wait(timeout=30)
