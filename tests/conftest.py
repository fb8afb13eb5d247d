"""Shared fixtures: small builders of Kubernetes objects as plain dicts."""

from __future__ import annotations

import pytest
from hypothesis import settings

from tests import factory

# Property tests draw the same examples on every run: a failure is reproducible, and a
# passing run does not depend on luck.
settings.register_profile("kai", derandomize=True)
settings.load_profile("kai")


@pytest.fixture
def k8s():
    return factory
