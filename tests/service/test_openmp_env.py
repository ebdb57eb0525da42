"""``attnserve serve`` puts the OpenMP wait policy in the environment before torch loads (its
OpenMP runtime reads it once, at load): checked in a fresh interpreter, with the server itself
replaced by a stub that reports what it would start with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The stub stands in for service.runtime.server, which imports the app and torch.
STUB = """
import json, os, sys, types

def serve(settings):
    print(json.dumps({"torch_loaded": "torch" in sys.modules,
                      "policy": os.environ.get("OMP_WAIT_POLICY")}))
    return 0

stub = types.ModuleType("service.runtime.server")
stub.serve = serve
sys.modules["service.runtime.server"] = stub
from service.cli import main
sys.exit(main(sys.argv[1:]))
"""


def serve_env(args: list[str], env: dict[str, str]) -> dict[str, object]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ATTNSERVE_") and k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
    }
    done = subprocess.run(
        [sys.executable, "-c", STUB, "serve", "--workers", "1", *args],  # the stub serves one
        env={**clean, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("args", "env", "policy"),
    [
        ([], {}, "PASSIVE"),  # the default
        ([], {"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE"),  # the user's own variable is kept
        (["--omp-wait-policy", "active"], {"OMP_WAIT_POLICY": "PASSIVE"}, "ACTIVE"),
        ([], {"ATTNSERVE_OMP_WAIT_POLICY": "active"}, "ACTIVE"),
        (["--omp-wait-policy", "default"], {}, None),  # OpenMP's own default
    ],
)
def test_serve_exports_the_wait_policy_before_torch_loads(
    args: list[str], env: dict[str, str], policy: str | None
) -> None:
    assert serve_env(args, env) == {"torch_loaded": False, "policy": policy}
