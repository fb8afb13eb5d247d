"""Shared fixtures: small builders of Kubernetes objects as plain dicts."""

from __future__ import annotations

import pytest

from tests import factory


@pytest.fixture
def k8s():
    return factory
