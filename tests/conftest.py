"""Suite-wide settings. No test reaches the Hugging Face Hub: a model name shaped like `org/name` that is not
bundled is looked up offline (HF_HUB_OFFLINE=1, inherited by the CLI subprocesses too).
tests/registry/test_registry_hub.py serves the Hub's endpoints on loopback and sets its own environment."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
