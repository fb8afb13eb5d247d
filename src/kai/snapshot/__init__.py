"""Reading cluster snapshots (Kubernetes manifests) into typed objects.

See :mod:`kai.snapshot.loader` for :func:`load_files`, :func:`load_text`,
:func:`load_objects` and :func:`load_config_file`.
"""
