"""Prometheus text exposition (the servers' and engines' /metrics): parse, sum, scrape."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from p2p_ops.endpoints.fetch import get_text

Sample = tuple[str, dict[str, str], float]

# LMCache's L1 eviction counters: how many chunks its eviction loop deleted, and how often the loop ran.
L1_EVICTED = "lmcache_mp_l1_evicted_chunks_total"
L1_EVICTION_RUNS = "lmcache_mp_l1_eviction_loop_triggered_total"
# Loads an L2 adapter completed into this server (label l2_name="p2p": pulls from peers).
P2P_LOADS = "lmcache_mp_l2_load_completed_requests_total"


def _parse(text: str) -> list[Sample]:
    return [(smp.name, dict(smp.labels), float(smp.value))
            for fam in text_string_to_metric_families(text) for smp in fam.samples]


def parse_metrics(text: str) -> list[Sample]:
    """Prometheus text exposition -> (name, labels, value) samples, by prometheus_client's parser (+Inf buckets,
    escaped label values, NaN). A malformed line costs only itself: the text is then parsed line by line."""
    text = text or ""
    try:
        return _parse(text)
    except ValueError:
        pass
    out: list[Sample] = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            try:
                out.extend(_parse(line + "\n"))
            except ValueError:
                continue
    return out


def metric_sum(samples: list[Sample], name: str, **labels: str) -> float:
    """Sum of a metric's samples whose labels include `labels` (0.0 when absent: counters appear lazily)."""
    return sum(v for n, lab, v in samples if n == name and all(lab.get(k) == val for k, val in labels.items()))


def scrape(url: str) -> list[Sample]:
    return parse_metrics(get_text(url.rstrip("/") + "/metrics") or "")
