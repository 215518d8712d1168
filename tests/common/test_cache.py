"""LoaderCache: bounded LRU, one load per key under concurrent requests, failed loads not cached."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from common.cache import LoaderCache


def test_lru_eviction_order():
    cache = LoaderCache(2)
    loads = []

    def loader(k):
        def load():
            loads.append(k)
            return k.upper()

        return load

    assert cache.get("a", loader("a")) == "A"
    assert cache.get("b", loader("b")) == "B"
    assert cache.get("a", loader("a")) == "A"  # hit: a becomes most recent
    assert cache.get("c", loader("c")) == "C"  # evicts b, the least recently used
    assert cache.keys() == ["a", "c"] and len(cache) == 2
    assert cache.get("b", loader("b")) == "B"  # reloaded, evicts a
    assert loads == ["a", "b", "c", "b"] and cache.keys() == ["c", "b"]


def test_never_holds_more_than_maxsize():
    cache = LoaderCache(3)
    for i in range(20):
        cache.get(i, lambda i=i: i)
        assert len(cache) == min(i + 1, 3)
    assert cache.keys() == [17, 18, 19]


def test_concurrent_requests_for_one_key_load_once():
    cache = LoaderCache(2)
    calls = []
    release = threading.Event()

    def load():
        calls.append(1)
        assert release.wait(30)
        return object()

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(cache.get, "k", load) for _ in range(8)]
        release.set()
        values = [f.result(timeout=60) for f in futures]
    assert len(calls) == 1 and all(v is values[0] for v in values)


def test_different_keys_load_in_parallel():
    # each load waits until both loads are running: a cache that serialised loads would break the barrier
    cache = LoaderCache(2)
    barrier = threading.Barrier(2, timeout=30)

    def load(k):
        barrier.wait()
        return k

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(cache.get, k, lambda k=k: load(k)) for k in ("x", "y")]
        assert sorted(f.result(timeout=60) for f in futures) == ["x", "y"]


def test_failed_load_is_not_cached():
    cache = LoaderCache(2)

    def bad():
        raise OSError("corrupt")

    with pytest.raises(OSError):
        cache.get("k", bad)
    assert len(cache) == 0
    assert cache.get("k", lambda: 5) == 5


def test_maxsize_must_be_positive():
    with pytest.raises(ValueError):
        LoaderCache(0)
