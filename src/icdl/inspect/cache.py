"""The activation cache of both model kinds; it lives in [`icdl.hooks`][icdl.hooks] and is re-exported here.

Keys are TransformerLens-style hook names (``blocks.0.attn.hook_pattern``, ``steps.2.update.hook_out``,
``hook_prompt``); the old tuple keys ``(block, "attn.pattern")`` and ``(step, sublayer[, slot])`` still
work. See [`icdl.hooks`][icdl.hooks].
"""

from __future__ import annotations

from icdl.hooks import ActivationCache

__all__ = ["ActivationCache"]
