"""Record slurmrestd answers for tests/fixtures/slurm-rest/<version>/ from a live cluster.

Usage (as root, a cluster started with ``deploy/local-slurm/start.sh --restd``)::

    python tests/support/capture_slurm_rest.py STATE_DIR OUT_DIR

Submits one sleeping job, holds it with an AdminComment, drains one node, then stores each
answer as ``<name>.json``: ``{"method", "path", "status", "body"}`` (the body as sent).
Stops and starts slurmctld once (the answers while it is down). Leaves the cluster as found,
less the job (cancelled).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from resurrect.demo.local_cluster import read_cluster_info

PARSERS = ("v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42")


def main(state_dir: Path, out: Path) -> None:
    info = read_cluster_info(state_dir)
    token = Path(info["RESTD_TOKEN_FILE"]).read_text().strip()
    transport = httpx.HTTPTransport(uds=info["RESTD_SOCKET"])
    http = httpx.Client(transport=transport, base_url="http://slurmrestd", timeout=30)
    headers = {"X-SLURM-USER-TOKEN": token}
    out.mkdir(parents=True, exist_ok=True)

    def call(name: str, method: str, path: str, body: Any = None) -> httpx.Response:
        answer = http.request(method, path, json=body, headers=headers)
        record = {"method": method, "path": path, "status": answer.status_code}
        record["body"] = answer.text
        (out / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
        return answer

    parser = ""
    for version in PARSERS:
        if call(f"ping-{version}", "GET", f"/slurm/{version}/ping/").status_code == 200:
            parser = version
            break
    base = f"/slurm/{parser}"
    env = {"SLURM_CONF": info["SLURM_CONF"], "PATH": "/usr/bin:/bin"}
    sbatch = [f"{info['BIN_DIR']}/sbatch", "--parsable", "-N1", "--requeue"]
    sbatch += ["--comment", '{"resurrect": {"max_restarts": 2}}', "-o", "/dev/null"]
    job = subprocess.run(
        [
            "runuser",
            "-u",
            info["DEMO_USER"],
            "--",
            "env",
            *(f"{k}={v}" for k, v in env.items()),
            *sbatch,
            "--wrap",
            "sleep 600",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    for _ in range(100):
        state = json.loads(http.get(f"{base}/job/{job}", headers=headers).text)
        if state["jobs"][0]["job_state"] == ["RUNNING"]:
            break
        time.sleep(0.2)
    call("drain", "POST", f"{base}/node/node4", {"state": ["DRAIN"], "reason": "resurrect: x"})
    call("mark", "POST", f"{base}/job/{job}", {"admin_comment": "resurrect-hold:1:" + "0" * 32})
    if parser == "v0.0.45":
        call("requeue", "POST", f"{base}/jobs/requeue", {"jobs": [job], "flags": ["Hold"]})
        call(
            "requeue-unknown",
            "POST",
            f"{base}/jobs/requeue",
            {"jobs": ["99999"], "flags": ["Hold"]},
        )
    call("job", "GET", f"{base}/job/{job}")
    call("jobs", "GET", f"{base}/jobs/")
    call("jobs-state", "GET", f"{base}/jobs/state/")
    call("job-unknown", "GET", f"{base}/job/99999")
    nodes = call("nodes", "GET", f"{base}/nodes/")
    since = json.loads(nodes.text)["last_update"]["number"]
    for _ in range(150):  # until no node changed since: HTTP 304 (26.05) or 500 (24.11)
        unchanged = call("nodes-unchanged", "GET", f"{base}/nodes/?update_time={since}")
        if unchanged.status_code != 200:
            break
        since = json.loads(unchanged.text)["last_update"]["number"]
        time.sleep(0.2)  # polling for the quiet second
    call("node", "GET", f"{base}/node/node4")
    call("node-unknown", "GET", f"{base}/node/nosuch")
    call("drain-unknown", "POST", f"{base}/node/nosuch", {"state": ["DRAIN"], "reason": "x"})
    call("cancel", "DELETE", f"{base}/job/{job}")
    call("cancel-unknown", "DELETE", f"{base}/job/99999")
    http.post(f"{base}/node/node4", json={"state": ["RESUME"]}, headers=headers)
    bad = dict(headers, **{"X-SLURM-USER-TOKEN": token[:-4] + "AAAA"})
    answer = http.get(f"{base}/jobs/", headers=bad)
    record = {"method": "GET", "path": f"{base}/jobs/", "status": answer.status_code}
    (out / "jobs-bad-token.json").write_text(json.dumps(dict(record, body=answer.text)) + "\n")
    pid = (state_dir / "run" / "slurmctld.pid").read_text().strip()
    subprocess.run(["kill", pid], check=True)
    for _ in range(100):
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.1)
    call("jobs-controller-down", "GET", f"{base}/jobs/")
    call("jobs-state-controller-down", "GET", f"{base}/jobs/state/")
    subprocess.run([f"{info['SBIN_DIR']}/slurmctld"], env=env, check=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
