"""Fixtures of the end-to-end suite: one real control plane for the whole run.

The control plane is provisioned by ``ci/control-plane`` (built once per machine).  If it
cannot be provisioned the suite is skipped, except under ``CI=true``, where that is a
failure: CI must exercise the real API server.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import E2E, Cluster
from tests.e2e.controlplane import ControlPlane, ProvisionError, provision_binaries
from tests.e2e.kubelet import FakeKubelet


def _unavailable(why: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"the end-to-end control plane cannot be provisioned: {why}", pytrace=False)
    pytest.skip(f"no control plane: {why}")


@pytest.fixture(scope="session")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2E]:
    try:
        plane = ControlPlane(provision_binaries()).start()
    except (ProvisionError, OSError) as err:
        _unavailable(str(err))
    workdir = tmp_path_factory.mktemp("e2e")
    harness = E2E(plane, workdir)
    try:
        harness.install()
        harness.kubelet = FakeKubelet(harness.api).start()
        yield harness
    finally:
        if harness.kubelet is not None:
            harness.kubelet.stop()
        plane.stop()


@pytest.fixture
def cluster(e2e: E2E, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    pool = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    c = Cluster(e2e, pool, tmp_path)
    try:
        yield c
    finally:
        failed = getattr(request.node, "rep_call", None)
        if failed is not None and failed.failed:
            for proc in c.procs:
                print(f"----- {proc.log_path.name}\n{proc.output()[-6000:]}")
        c.cleanup()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
