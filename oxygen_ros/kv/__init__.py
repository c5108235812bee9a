"""Unified KV cache manager: token-slot pool, shared frame prefixes, text requests, batch plans."""

from oxygen_ros.kv.batch import BatchPlan, commit, plan_step, unfed_tokens
from oxygen_ros.kv.manager import Admission, KVCacheManager, KVStats, WaitingSpec
from oxygen_ros.kv.pool import Extent, KVPool
from oxygen_ros.kv.prefix import SharedPrefix
from oxygen_ros.kv.request import FINISH_REASONS, TextRequest

__all__ = [
    "Admission", "BatchPlan", "Extent", "FINISH_REASONS", "KVCacheManager", "KVPool", "KVStats",
    "SharedPrefix", "TextRequest", "WaitingSpec", "commit", "plan_step", "unfed_tokens",
]
