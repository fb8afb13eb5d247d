"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

A candidate takes the Lease when it is free, released, or not renewed for its
``leaseDurationSeconds``, measured on the candidate's own monotonic clock from the moment
it last saw the Lease change (so clock skew between replicas does not matter).  The leader
renews every ``retry_period``; if it cannot renew for ``renew_deadline`` it steps down.
``renew_deadline < lease_duration`` keeps a stalled leader from overlapping the next one.
Writes are compare-and-swap on the Lease's resourceVersion.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone

from kai.k8s.client import KubeClient, status_of

log = logging.getLogger(__name__)


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}"


def _micro_time(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        *,
        identity: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_started: Callable[[], None] | None = None,
        on_stopped: Callable[[], None] | None = None,
    ) -> None:
        if not retry_period < renew_deadline < lease_duration:
            raise ValueError("need retry_period < renew_deadline < lease_duration")
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_started = on_started
        self.on_stopped = on_stopped
        self._leader = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._observed: tuple | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0

    @property
    def is_leader(self) -> bool:
        return self._leader.is_set()

    def wait_for_leadership(self, timeout: float | None = None) -> bool:
        return self._leader.wait(timeout)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self, *, release: bool = True) -> None:
        """Stop campaigning; a leader releases the Lease so a standby takes over at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.retry_period + 5)
        if self.is_leader:
            self._lose()
            if release:
                self.release()

    def _run(self) -> None:
        while not self._stop.is_set():
            ok = self._attempt()
            now = time.monotonic()
            if ok:
                self._last_renew = now
                if not self.is_leader:
                    log.info(
                        "%s became the leader (lease %s/%s)",
                        self.identity,
                        self.namespace,
                        self.name,
                    )
                    self._leader.set()
                    if self.on_started is not None:
                        self.on_started()
            elif self.is_leader and now - self._last_renew > self.renew_deadline:
                log.warning(
                    "%s could not renew the lease for %.1fs; stepping down",
                    self.identity,
                    now - self._last_renew,
                )
                self._lose()
            self._stop.wait(self.retry_period)

    def _lose(self) -> None:
        if self.is_leader:
            self._leader.clear()
            if self.on_stopped is not None:
                self.on_stopped()

    def _attempt(self) -> bool:
        try:
            return self.try_acquire_or_renew()
        except Exception as err:  # noqa: BLE001 - a failed attempt is retried
            log.warning("leader election: %s", err)
            return False

    # ------------------------------------------------------------------ one attempt
    def try_acquire_or_renew(self) -> bool:
        now_wall = datetime.now(timezone.utc)
        duration = max(1, math.ceil(self.lease_duration))
        lease = self.client.get_lease(self.namespace, self.name)
        if lease is None:
            body = {
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {
                    "holderIdentity": self.identity,
                    "leaseDurationSeconds": duration,
                    "acquireTime": _micro_time(now_wall),
                    "renewTime": _micro_time(now_wall),
                    "leaseTransitions": 0,
                },
            }
            try:
                self.client.create_lease(self.namespace, body)
            except Exception as err:
                if status_of(err) == 409:  # another candidate created it first
                    return False
                raise
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (
            holder,
            spec.get("renewTime"),
            spec.get("leaseDurationSeconds"),
            spec.get("leaseTransitions"),
        )
        now = time.monotonic()
        if record != self._observed:
            self._observed, self._observed_at = record, now
        held_for = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and now < self._observed_at + held_for:
            return False  # held by another candidate and still fresh
        new_spec = dict(spec)
        new_spec["holderIdentity"] = self.identity
        new_spec["leaseDurationSeconds"] = duration
        new_spec["renewTime"] = _micro_time(now_wall)
        if holder != self.identity:
            new_spec["acquireTime"] = _micro_time(now_wall)
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        lease = dict(lease)
        lease["spec"] = new_spec
        try:
            self.client.update_lease(self.namespace, lease)
        except Exception as err:
            if status_of(err) == 409:  # someone else wrote it since we read it
                return False
            raise
        return True

    def release(self) -> None:
        """Give the Lease up (empty holder) so that a standby need not wait for expiry."""
        try:
            lease = self.client.get_lease(self.namespace, self.name)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            spec = dict(lease.get("spec") or {})
            spec["holderIdentity"] = ""
            spec["leaseDurationSeconds"] = 1
            spec["renewTime"] = _micro_time(datetime.now(timezone.utc))
            self.client.update_lease(self.namespace, {**lease, "spec": spec})
            log.info("%s released the lease", self.identity)
        except Exception as err:  # noqa: BLE001 - best effort on the way out
            log.warning("releasing the lease failed: %s", err)
